"""The worker remembers the last token it hashed (gateway/op.c): a token that differs from it in
one character, at either end, or only in length, is hashed anew and refused; the remembered
one still works after them, and a revoked one is refused though its hash is remembered."""
import unittest

from harness import StackTest, tenant


def other(tok, at):
    """tok with its character at index at changed."""
    c = "A" if tok[at] != "A" else "B"
    return tok[:at] + c + tok[at + 1:]


class TokenMemo(StackTest):
    stack_args = {"workers": 1, "env": {"BOTGATE_CACHE_TTL_MS": "0"}}

    def test_only_the_same_token_passes(self):
        s = self.s
        tok, body = tenant(s, "fb-memo", "m-memo", "psid-memo")
        tok2 = s.token("A", "bot:sendResponses")
        for wrong in (other(tok, 0), other(tok, len(tok) - 1), tok[:-1], tok + "x"):
            self.assertEqual(s.send(body, tok).status, 200)
            self.assert_unauthorized(s.send(body, wrong))
        self.assertEqual(s.send(body, tok2).status, 200)
        self.assertEqual(s.send(body, tok).status, 200)
        s.ctl("token", "revoke", tok)
        self.assert_unauthorized(s.send(body, tok))
        self.assert_unauthorized(s.send(body, tok))
        self.assertEqual(s.send(body, tok2).status, 200)


if __name__ == "__main__":
    unittest.main()
