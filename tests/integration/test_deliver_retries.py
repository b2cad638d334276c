#!/usr/bin/env python3
"""Delivery's own retries (gateway/deliver.c) on top of the transport's: a platform that refuses
every stream it has read (RST_STREAM REFUSED_STREAM: not processed, safe to send again) gets
each message at most as many times as the transport tries one call (OWN_TRIES in
net/net.c, 5), never that again from delivery's retry of a failed connect: an attack
measured 10.

The platform is test_upstream_http2's HTTP/2 server, its connections told to refuse the texts
that start with "refuse-always".

Run: BOTGATE_BIN_DIR=/work/main/build-asan/bin /usr/bin/python3 test_deliver_retries.py"""
import unittest

import h2.errors

import test_upstream_http2 as h2platform
from test_upstream_http2 import OwnHttp2Test

TRANSPORT_TRIES = 5  # OWN_TRIES in net/net.c: sends of a call refused unprocessed


class RefusingConnection(h2platform.Connection):
    def play(self, s, text):
        if text.startswith("refuse-always"):
            self.reset(s, h2.errors.ErrorCodes.REFUSED_STREAM, "refused")
        else:
            super().play(s, text)


class DeliverRetries(OwnHttp2Test):
    timeout_ms = "3000"

    @classmethod
    def setUpClass(cls):
        # H2Platform makes its connections by this module name (this process only)
        h2platform.Connection = RefusingConnection
        super().setUpClass()

    def test_a_refused_stream_is_tried_by_the_transport_only(self):
        r = self.send("refuse-always-1")
        self.assertEqual(r["ok"], 0, r)
        streams = self.platform.of("refuse-always-1")
        self.explained(self.assertLessEqual, len(streams), TRANSPORT_TRIES,
                       "each try of the transport was made again by delivery")
        self.assertGreater(len(streams), 1, "the transport sends a refused stream again")
        self.assertTrue(all(s.outcome == "refused" for s in streams))
        # the platform still works for what it does not refuse, on the same connection pool
        self.assert_sent(self.send("plain-after-refusals"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
