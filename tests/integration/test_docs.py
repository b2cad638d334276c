"""The documentation kept true: docs/openapi.yaml is OpenAPI 3.1 and every real answer of botgate
(successes and errors of both operations, the unauthorized answer, a 413, the GET endpoints)
validates against it; every example of docs/api.md runs against a real botgate (its data loaded
with botgatectl from the same document) and answers what the document says; docs/operations.md
lists every setting of `botgate --help`, every metric and every Redis key.

Python standard library only: a loader for the block-style YAML subset openapi.yaml uses and a
small JSON Schema validator are below."""
import json
import os
import re
import shlex
import subprocess
import unittest

from harness import BIN, StackTest, facebook_channel, cloud_channel, member, http, wait_for

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOCS = os.path.join(ROOT, "docs")


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# A YAML loader for the subset openapi.yaml is written in: block mappings and block sequences
# (indented with spaces), "- key: value" items, plain / 'single' / "double" quoted scalars,
# integers, true/false/null, flow sequences of scalars ("[a, 'b']"), {} and [], comments.
# Anything else is an error, so the file stays inside what this loader (and any YAML parser)
# reads the same way.
# ---------------------------------------------------------------------------------------------

class YamlError(ValueError):
    pass


def _strip_comment(line):
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"" and (i == 0 or line[i - 1] in " [,:-"):
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


_KEY = re.compile(r"""^(?:'((?:[^']|'')*)'|"((?:[^"\\]|\\.)*)"|([^\s'"#\[\]{},&*!|>%@`-][^:#]*?|-[^\s:#][^:#]*?))\s*:(?:\s+(.*))?$""")


def _scalar(text, where):
    t = text.strip()
    if t.startswith("'"):
        if len(t) < 2 or not t.endswith("'") or "'" in t[1:-1].replace("''", ""):
            raise YamlError("%s: bad single-quoted scalar %r" % (where, t))
        return t[1:-1].replace("''", "'")
    if t.startswith('"'):
        try:
            v = json.loads(t)
        except ValueError:
            raise YamlError("%s: bad double-quoted scalar %r" % (where, t))
        if not isinstance(v, str):
            raise YamlError("%s: bad double-quoted scalar %r" % (where, t))
        return v
    if t == "{}":
        return {}
    if t == "[]":
        return []
    if t.startswith("["):
        if not t.endswith("]"):
            raise YamlError("%s: unterminated flow sequence %r" % (where, t))
        items, cur, quote = [], "", None
        for c in t[1:-1]:
            if quote:
                cur += c
                if c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
                cur += c
            elif c == ",":
                items.append(cur)
                cur = ""
            elif c in "[]{}":
                raise YamlError("%s: nested flow collections are not supported: %r" % (where, t))
            else:
                cur += c
        if cur.strip():
            items.append(cur)
        return [_scalar(i, where) for i in items]
    if t in ("null", "~", ""):
        return None
    if t == "true":
        return True
    if t == "false":
        return False
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", t):
        return int(t)
    if re.fullmatch(r"-?(0|[1-9][0-9]*)\.[0-9]+", t):
        return float(t)
    if t[0] in "{}&*!|>%@`\"'" or t.startswith("- ") or t.startswith("? ") or ": " in t \
            or " #" in t or t.endswith(":"):
        raise YamlError("%s: this plain scalar must be quoted: %r" % (where, t))
    if t in ("yes", "no", "on", "off", "Yes", "No", "True", "False", "NULL", "Null"):
        raise YamlError("%s: ambiguous plain scalar %r must be quoted" % (where, t))
    return t


def yaml_load(text):
    lines = []
    for n, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw:
            raise YamlError("line %d: tab character" % n)
        s = _strip_comment(raw)
        if s.strip() in ("", "---"):
            continue
        lines.append([len(s) - len(s.lstrip(" ")), s.strip(), n])
    pos = [0]

    def is_item(content):
        return content == "-" or content.startswith("- ")

    def block(indent):
        ind, content, n = lines[pos[0]]
        if ind != indent:
            raise YamlError("line %d: bad indentation" % n)
        return sequence(ind) if is_item(content) else mapping(ind)

    def value_after_key(ind, n):
        # A key with nothing after it: a nested block, or null.
        if pos[0] < len(lines):
            nind, ncontent, _ = lines[pos[0]]
            if nind > ind or (nind == ind and is_item(ncontent)):
                return block(nind)
        return None

    def mapping(ind):
        out = {}
        while pos[0] < len(lines) and lines[pos[0]][0] == ind and not is_item(lines[pos[0]][1]):
            _, content, n = lines[pos[0]]
            m = _KEY.match(content)
            if not m:
                raise YamlError("line %d: expected 'key: value', got %r" % (n, content))
            if m.group(1) is not None:
                key = m.group(1).replace("''", "'")
            elif m.group(2) is not None:
                key = json.loads('"%s"' % m.group(2))
            else:
                key = m.group(3).strip()
            if key in out:
                raise YamlError("line %d: duplicate key %r" % (n, key))
            pos[0] += 1
            rest = m.group(4)
            if rest is None or rest == "":
                out[key] = value_after_key(ind, n)
            else:
                out[key] = _scalar(rest, "line %d" % n)
        if pos[0] < len(lines) and lines[pos[0]][0] > ind:
            raise YamlError("line %d: bad indentation" % lines[pos[0]][2])
        return out

    def sequence(ind):
        out = []
        while pos[0] < len(lines) and lines[pos[0]][0] == ind and is_item(lines[pos[0]][1]):
            _, content, n = lines[pos[0]]
            rest = content[1:].lstrip(" ")
            if rest == "":
                pos[0] += 1
                if pos[0] >= len(lines) or lines[pos[0]][0] <= ind:
                    out.append(None)
                else:
                    out.append(block(lines[pos[0]][0]))
            elif is_item(rest):
                # "- - item": a sequence whose first line starts after the dash
                lines[pos[0]] = [ind + len(content) - len(rest), rest, n]
                out.append(sequence(lines[pos[0]][0]))
            elif _KEY.match(rest):
                # "- key: value": a mapping whose first line starts after the dash
                lines[pos[0]] = [ind + len(content) - len(rest), rest, n]
                out.append(mapping(lines[pos[0]][0]))
            else:
                out.append(_scalar(rest, "line %d" % n))
                pos[0] += 1
        if pos[0] < len(lines) and lines[pos[0]][0] > ind:
            raise YamlError("line %d: bad indentation" % lines[pos[0]][2])
        return out

    if not lines:
        return None
    doc = block(lines[0][0])
    if pos[0] != len(lines):
        raise YamlError("line %d: unexpected content" % lines[pos[0]][2])
    return doc


# ---------------------------------------------------------------------------------------------
# A JSON Schema (2020-12, as OpenAPI 3.1 uses it) validator for the keywords openapi.yaml uses.
# An unknown keyword is an error, so that a schema never says more than this checks.
# ---------------------------------------------------------------------------------------------

ANNOTATIONS = {"description", "title", "example", "examples", "default", "format", "deprecated",
               "readOnly", "writeOnly", "$comment", "contentMediaType"}
KEYWORDS = {"$ref", "type", "enum", "const", "properties", "required", "additionalProperties",
            "items", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
            "pattern", "oneOf", "anyOf", "allOf", "not", "minProperties"}


def _type_ok(value, t):
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "null":
        return value is None
    raise AssertionError("unknown type %r in schema" % t)


def _same(a, b):
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def resolve(root, ref):
    if not ref.startswith("#/"):
        raise AssertionError("only local $ref are supported: %r" % ref)
    node = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def validate(value, schema, root, path="$"):
    """Returns a list of messages, empty when value is valid."""
    if schema is True or schema == {}:
        return []
    if schema is False:
        return ["%s: no value is allowed here" % path]
    errors = []
    unknown = set(schema) - KEYWORDS - ANNOTATIONS
    if unknown:
        raise AssertionError("%s: schema keywords this validator does not know: %s"
                             % (path, sorted(unknown)))
    if "$ref" in schema:
        errors += validate(value, resolve(root, schema["$ref"]), root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(value, t) for t in types):
            return errors + ["%s: %r is not of type %s" % (path, value, "/".join(types))]
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        errors.append("%s: %r is not one of %r" % (path, value, schema["enum"]))
    if "const" in schema and not _same(value, schema["const"]):
        errors.append("%s: %r is not %r" % (path, value, schema["const"]))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append("%s: required property %r is missing" % (path, name))
        if len(value) < schema.get("minProperties", 0):
            errors.append("%s: fewer than %d properties" % (path, schema["minProperties"]))
        for name, v in value.items():
            if name in props:
                errors += validate(v, props[name], root, "%s.%s" % (path, name))
            elif "additionalProperties" in schema:
                extra = schema["additionalProperties"]
                if extra is False:
                    errors.append("%s: property %r is not allowed" % (path, name))
                else:
                    errors += validate(v, extra, root, "%s.%s" % (path, name))
    if isinstance(value, list):
        if "items" in schema:
            for i, v in enumerate(value):
                errors += validate(v, schema["items"], root, "%s[%d]" % (path, i))
        if len(value) < schema.get("minItems", 0):
            errors.append("%s: fewer than %d items" % (path, schema["minItems"]))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append("%s: more than %d items" % (path, schema["maxItems"]))
    if isinstance(value, str):
        n = len(value.encode("utf-8"))
        if n < schema.get("minLength", 0):
            errors.append("%s: shorter than %d" % (path, schema["minLength"]))
        if "maxLength" in schema and n > schema["maxLength"]:
            errors.append("%s: longer than %d" % (path, schema["maxLength"]))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append("%s: %r does not match %r" % (path, value, schema["pattern"]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append("%s: %r is below %r" % (path, value, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append("%s: %r is above %r" % (path, value, schema["maximum"]))
    if "allOf" in schema:
        for sub in schema["allOf"]:
            errors += validate(value, sub, root, path)
    if "anyOf" in schema:
        if not any(not validate(value, sub, root, path) for sub in schema["anyOf"]):
            errors.append("%s: matches none of anyOf: %s" % (path, "; ".join(
                "[%d] %s" % (i, validate(value, sub, root, path)[:2])
                for i, sub in enumerate(schema["anyOf"]))))
    if "oneOf" in schema:
        results = [validate(value, sub, root, path) for sub in schema["oneOf"]]
        good = [i for i, r in enumerate(results) if not r]
        if len(good) != 1:
            errors.append("%s: matches %d of oneOf (%s); why: %s" % (
                path, len(good), good, "; ".join("[%d] %s" % (i, r[:2])
                                                 for i, r in enumerate(results))))
    if "not" in schema and not validate(value, schema["not"], root, path):
        errors.append("%s: matches a schema it must not match" % path)
    return errors


# ---------------------------------------------------------------------------------------------
# docs/api.md: the example data (```sh blocks of botgatectl commands) and the examples
# (an ```http block, prose with "HTTP <status>", then the ```json answer).
# ---------------------------------------------------------------------------------------------

FENCE = re.compile(r"^```([a-z]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


def fenced_blocks(text):
    """[(lang, body, start, end)] of every fenced block, in order."""
    return [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]


def doc_data_commands(text):
    """The botgatectl commands of the ```sh blocks: [("put"|"import", args, stdin) or
    ("token", NAME, args)]."""
    cmds = []
    for lang, body, _, _ in fenced_blocks(text):
        if lang != "sh":
            continue
        lines = body.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i].strip()
            i += 1
            if not line or line.startswith("#"):
                continue
            m = re.fullmatch(r"botgatectl (.+?) - <<'EOF'", line)
            if m:
                body_lines = []
                while lines[i].strip() != "EOF":
                    body_lines.append(lines[i])
                    i += 1
                i += 1
                cmds.append(("stdin", shlex.split(m.group(1)) + ["-"], "\n".join(body_lines)))
                continue
            m = re.fullmatch(r"([A-Z0-9_]+)=\$\(botgatectl (token create .+)\)", line)
            if m:
                cmds.append(("token", m.group(1), shlex.split(m.group(2))))
                continue
            raise AssertionError("docs/api.md: a ```sh line the test cannot run: %r" % line)
    return cmds


def doc_examples(text):
    """[{"title", "method", "target", "headers", "body", "status", "answer"}] in order."""
    blocks = fenced_blocks(text)
    examples = []
    for k, (lang, body, start, end) in enumerate(blocks):
        if lang != "http":
            continue
        title = re.findall(r"^#+ (.+)$", text[:start], re.M)[-1]
        if k + 1 >= len(blocks) or blocks[k + 1][0] != "json":
            raise AssertionError("docs/api.md, %s: the ```http block is not followed by a "
                                 "```json answer" % title)
        between = text[end:blocks[k + 1][2]]
        status = re.search(r"HTTP (\d{3})", between)
        if status is None:
            raise AssertionError("docs/api.md, %s: no 'HTTP <status>' between the request and "
                                 "its answer" % title)
        head, _, req_body = body.partition("\n\n")
        head_lines = head.split("\n")
        method, target, version = head_lines[0].split(" ")
        if version != "HTTP/1.1":
            raise AssertionError("docs/api.md, %s: request line %r" % (title, head_lines[0]))
        headers = {}
        for h in head_lines[1:]:
            name, _, value = h.partition(":")
            headers[name.strip()] = value.strip()
        examples.append({"title": title, "method": method, "target": target, "headers": headers,
                         "body": req_body.strip(), "status": int(status.group(1)),
                         "answer": json.loads(blocks[k + 1][1])})
    return examples


# Values that vary from call to call (docs/api.md says which): only their type is compared.
VARYING = {"timestamp": int, "messageId": str}
MEMBER_ID = re.compile(r"^[0-9a-f]{24}$")


def compare(expected, actual, path, generated_member, problems):
    key = path.rsplit(".", 1)[-1]
    if key in VARYING or re.search(r"\.messages\[\d+\]\.id$", path):
        want = VARYING.get(key, str)
        if not (isinstance(actual, want) and not isinstance(actual, bool)):
            problems.append("%s: %r is not a %s" % (path, actual, want.__name__))
        return
    if key == "member" and generated_member:
        if not (isinstance(actual, str) and MEMBER_ID.match(actual)):
            problems.append("%s: %r is not a generated member id" % (path, actual))
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            problems.append("%s: expected an object, got %r" % (path, actual))
            return
        for k in sorted(set(expected) | set(actual)):
            if k not in actual:
                problems.append("%s.%s: missing in the answer" % (path, k))
            elif k not in expected:
                problems.append("%s.%s: in the answer (%r) but not in the document"
                                % (path, k, actual[k]))
            else:
                compare(expected[k], actual[k], "%s.%s" % (path, k), generated_member, problems)
        return
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            problems.append("%s: expected %d elements, got %r" % (path, len(expected), actual))
            return
        for i, (e, a) in enumerate(zip(expected, actual)):
            compare(e, a, "%s[%d]" % (path, i), generated_member, problems)
        return
    if not _same(expected, actual) or type(expected) is not type(actual):
        problems.append("%s: expected %r, got %r" % (path, expected, actual))


def load_openapi():
    text = read("docs", "openapi.yaml")
    doc = yaml_load(text)
    try:  # where PyYAML happens to be installed, it must read the file the same way
        import yaml
    except ImportError:
        yaml = None
    if yaml is not None:
        assert yaml.safe_load(text) == doc, "the YAML subset loader and PyYAML disagree"
    return doc


def answer_schema(api, method, path, status, content_type="application/json"):
    op = api["paths"][path][method.lower()]
    responses = op["responses"]
    if str(status) not in responses:
        raise AssertionError("openapi.yaml: %s %s has no answer %d" % (method, path, status))
    resp = responses[str(status)]
    if "$ref" in resp:
        resp = resolve(api, resp["$ref"])
    return resp["content"][content_type]["schema"]


def request_schema(api, method, path):
    body = api["paths"][path][method.lower()]["requestBody"]
    if "$ref" in body:
        body = resolve(api, body["$ref"])
    return body["content"]["application/json"]["schema"]


class Docs(StackTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.load()
        except BaseException:
            cls.s.close()  # tearDownClass does not run when setUpClass fails
            raise

    @classmethod
    def load(cls):
        s = cls.s
        cls.api_md = read("docs", "api.md")
        cls.tokens = {}
        # channels first: botgatectl refuses a member whose channel is not stored yet
        for cmd in sorted(doc_data_commands(cls.api_md),
                          key=lambda c: not (c[0] == "stdin" and c[1][:2] == ["channel", "put"])):
            if cmd[0] == "stdin":
                s.ctl(*cmd[1], input=cmd[2])
            else:
                cls.tokens[cmd[1]] = s.ctl(*cmd[2]).stdout.strip()
        # Data of the schema checks, apart from the examples' so that neither sees the other's
        # changes.
        s.put("channel", facebook_channel("S-fb", "SA"))
        s.put("channel", facebook_channel("S-off", "SA", on=False))
        s.put("channel", cloud_channel("S-cloud", "SA"))
        # Written directly, as another system would: botgatectl refuses the unknown type.
        s.redis("SET", "botgate:channel:{S-odd}",
                json.dumps({"_id": "S-odd", "app": "SA", "type": "pigeon", "on": True, "info": {}}))
        s.put("member", member("S-m1", "S-fb", "SA", "psid-s1"))
        s.put("member", member("S-bad", "S-fb", "SA", "psid-invalid-s"))
        s.put("member", member("S-c1", "S-cloud", "SA", "+852 6000 0001",
                               platform="whatsapp-cloud"))
        s.put("member", member("S-c2", "S-cloud", "SA", "+852 invalid",
                               platform="whatsapp-cloud"))
        # Written directly, as another system would: botgatectl refuses the unknown action.
        nodes = {"N1": {"preAction": [{"type": "set", "path": "member.meta.a",
                                       "value": "{{agendaMeta.a}}"}],
                        "response": [{"type": "TEXT", "text": "a={{member.meta.a}}"}],
                        "postAction": [{"type": "addTags", "tags": ["x"]},
                                       {"type": "nosuchaction"}],
                        "redirect": {"tree": "S-T", "nodeCompositeId": "N2"}},
                 "N2": {"response": [{"type": "TEMPLATE", "elementName": "t",
                                      "languageCode": "en"}],
                        "redirect": {"tree": "S-T", "nodeCompositeId": "gone"}}}
        args = ["HSET", "botgate:tree:S-T", "_tree", json.dumps({"app": "SA", "name": "s"})]
        for k, v in nodes.items():
            args += [k, json.dumps(v)]
        s.redis(*args)
        cls.stok = s.token("SA", "bot:admin")
        cls.send_only = s.token("SA", "bot:sendResponses")
        cls.openapi = load_openapi()

    # ---- 1. the OpenAPI document itself ----
    def test_1_openapi_document(self):
        api = self.openapi
        self.assertTrue(str(api.get("openapi", "")).startswith("3.1."), api.get("openapi"))
        self.assertIn("title", api["info"])
        self.assertIn("version", api["info"])
        for path in ("/sendResponses", "/redirectMemberToNode"):
            op = api["paths"][path]["post"]
            for status in ("200", "413", "500"):
                self.assertIn(status, op["responses"], (path, status))
            self.assertIn("requestBody", op)
            self.assertIn("operationId", op)
        for path in ("/healthz", "/readyz", "/metrics"):
            op = api["paths"][path]["get"]
            self.assertIn("200", op["responses"], path)
            self.assertEqual(op.get("security"), [], path + " needs no token")
        self.assertIn("503", api["paths"]["/readyz"]["get"]["responses"])
        schemes = api["components"]["securitySchemes"]
        kinds = sorted((v["type"], v.get("scheme", v.get("in"))) for v in schemes.values())
        self.assertEqual(kinds, [("apiKey", "query"), ("http", "bearer")])
        query = [v for v in schemes.values() if v["type"] == "apiKey"][0]
        self.assertEqual(query["name"], "accessToken")
        self.assertEqual(sorted(next(iter(r)) for r in api["security"]), sorted(schemes))
        # Every $ref points somewhere, every schema uses only keywords the validator knows.
        def walk(node, where):
            if isinstance(node, dict):
                if "$ref" in node:
                    resolve(api, node["$ref"])
                for k, v in node.items():
                    walk(v, where + "/" + str(k))
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, "%s[%d]" % (where, i))
        walk(api, "#")
        def keywords(schema, where):
            if isinstance(schema, bool):
                return
            unknown = set(schema) - KEYWORDS - ANNOTATIONS
            self.assertFalse(unknown, "%s: keywords the validator does not know" % where)
            for k in ("items", "not", "additionalProperties"):
                if isinstance(schema.get(k), dict):
                    keywords(schema[k], where + "/" + k)
            for k in ("allOf", "anyOf", "oneOf"):
                for i, sub in enumerate(schema.get(k, [])):
                    keywords(sub, "%s/%s[%d]" % (where, k, i))
            for name, sub in schema.get("properties", {}).items():
                keywords(sub, where + "/properties/" + name)
        for name, schema in api["components"]["schemas"].items():
            keywords(schema, "#/components/schemas/" + name)
        for name, resp in api["components"]["responses"].items():
            for ctype, content in resp["content"].items():
                keywords(content["schema"], "#/components/responses/%s/%s" % (name, ctype))
        # The err_codes: core/error.h, the table of docs/api.md and the schemas agree.
        header = {int(c) for c in re.findall(r"BG_ERR_\w+ = (\d+),", read("core", "error.h"))}
        table = set()
        section = self.api_md.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
        for m in re.finditer(r"^\| (\d{3}) \|", section, re.M):
            table.add(int(m.group(1)))
        self.assertEqual(header, table, "core/error.h vs the err_code table of docs/api.md")
        schemas = api["components"]["schemas"]
        top = set(schemas["Failure"]["properties"]["err_code"]["enum"])
        element = set(schemas["ElementError"]["properties"]["err_code"]["enum"])
        self.assertEqual(top | element, table, "the err_code enums of openapi.yaml")
        # The limits of core/request.h are what the documents say.
        limits = read("core", "request.h")
        for name, text in (("REQUEST_MAX_RESPONSES", "| responses per request | 50 |"),
                           ("REQUEST_MAX_DEPTH", "| nesting of the body | 64 levels"),
                           ("REQUEST_MAX_ID", "| 256 bytes | 118 |")):
            self.assertIn(text, self.api_md, name)
        # (the macros' values are aligned by clang-format: any run of blanks between)
        for define in ("REQUEST_MAX_RESPONSES 50", "REQUEST_MAX_DEPTH 64", "REQUEST_MAX_ID 256",
                       "REQUEST_MAX_BODY (1024 * 1024)", "REQUEST_MAX_STRING (64 * 1024)"):
            name, value = define.split(" ", 1)
            self.assertRegex(limits, r"#define %s\s+%s" % (name, re.escape(value)), define)
        self.assertEqual(
            schemas["SendRequest"]["properties"]["response"]["maxItems"], 50)

    # ---- 2. every example of docs/api.md ----
    def test_2_api_examples(self):
        examples = doc_examples(self.api_md)
        self.assertGreaterEqual(len(examples), 20)
        api = self.openapi
        failures = []
        for ex in examples:
            problems = []
            target = ex["target"]
            headers = dict(ex["headers"])
            headers.pop("Host", None)
            body = ex["body"]
            for name, tok in self.tokens.items():
                placeholder = "<%s>" % name
                target = target.replace(placeholder, tok)
                body = body.replace(placeholder, tok)
                headers = {k: v.replace(placeholder, tok) for k, v in headers.items()}
            left = re.findall(r"<[A-Z0-9_]+>", target + body + json.dumps(headers))
            if left:
                failures.append("%s: placeholders the data section does not define: %s"
                                % (ex["title"], left))
                continue
            path = target.split("?", 1)[0]
            request = json.loads(body)
            ans = http(ex["method"], self.s.url + target, body.encode(), headers)
            if ans.status != ex["status"]:
                problems.append("HTTP %d, the document says %d" % (ans.status, ex["status"]))
            if ans.json is None:
                problems.append("the answer is not JSON: %r" % ans.raw[:300])
            else:
                generated = "memberId" not in request
                compare(ex["answer"], ans.json, "$", generated, problems)
                if generated and ans.json.get("ok") == 1:
                    self.assertEqual(ans.json["member"], ans.json["sendResult"]["member"])
                problems += ["answer vs openapi.yaml: " + p for p in validate(
                    ans.json, answer_schema(api, ex["method"], path, ans.status), api)]
            problems += ["document's answer vs openapi.yaml: " + p for p in validate(
                ex["answer"], answer_schema(api, ex["method"], path, ex["status"]), api)]
            if ex["status"] == 200:
                problems += ["request vs openapi.yaml: " + p for p in validate(
                    request, request_schema(api, ex["method"], path), api)]
            if "X-Request-Id" in headers and ans.headers.get("X-Request-Id") != \
                    headers["X-Request-Id"]:
                problems.append("X-Request-Id %r not repeated (got %r)"
                                % (headers["X-Request-Id"], ans.headers.get("X-Request-Id")))
            if not ans.headers.get("X-Request-Id"):
                problems.append("no X-Request-Id in the answer")
            if "application/json" not in (ans.headers.get("Content-Type") or ""):
                problems.append("Content-Type %r" % ans.headers.get("Content-Type"))
            if problems:
                failures.append("%s:\n    %s\n    actual answer: %s"
                                % (ex["title"], "\n    ".join(problems), ans.raw[:2000]))
        self.assertFalse(failures, "docs/api.md examples that do not hold:\n" +
                         "\n".join(failures))
        # The document's statements about state after the run.
        m1 = json.loads(self.s.redis("GET", "botgate:member:{C1}:M1"))
        self.assertEqual(m1["meta"]["lastOrder"], "8812")
        self.assertIn("shipped", m1["tags"])
        self.assertEqual((m1["botMeta"]["tree"], m1["botMeta"]["nodeCompositeId"]),
                         ("T1", "loop"))
        # Node code: the script's total was written back; the failed script's change was not.
        l1 = json.loads(self.s.redis("GET", "botgate:member:{C1}:L1"))
        self.assertEqual(l1["botMeta"]["tempData"], {"total": 39})
        self.assertNotIn("seen", l1["meta"])
        self.assertEqual((l1["botMeta"]["tree"], l1["botMeta"]["nodeCompositeId"]),
                         ("TL", "broken"))

    # ---- 3. docs/operations.md against the binary, the metrics and the key layout ----
    def test_3_operations_doc(self):
        ops = read("docs", "operations.md")
        rows = {}
        for line in ops.split("\n"):
            m = re.match(r"^\| `(BOTGATE_[A-Z0-9_]+)` \|", line)
            if m:
                rows[m.group(1)] = line
        out = subprocess.run([os.path.join(BIN, "botgate"), "--help"], capture_output=True,
                             text=True, timeout=10).stdout
        settings = re.findall(r"^  (BOTGATE_[A-Z0-9_]+) .*\(default: (.*)\)$", out, re.M)
        self.assertGreaterEqual(len(settings), 20, out)
        for name, default in settings:
            self.assertIn(name, rows, "docs/operations.md has no table row for " + name)
            self.assertIn("`%s`" % default, rows[name],
                          "docs/operations.md: the default of %s is %s" % (name, default))
        metrics = http("GET", self.s.url + "/metrics").raw
        for name in re.findall(r"^# TYPE (\S+) ", metrics, re.M):
            self.assertTrue("`%s`" % name in ops, "docs/operations.md does not list " + name)
        for literal in re.findall(r'"%s([a-z]+:\{?)', read("store", "keys.c")):
            self.assertTrue("`botgate:" + literal in ops,
                            "docs/operations.md lacks the key botgate:" + literal)

    # ---- 4. real answers against the schemas ----
    def check(self, method, path, body=None, status=None, token=None, query_token=None,
              raw=None, code=None):
        s = self.s
        if method == "GET":
            ans = http("GET", s.url + path)
        else:
            ans = s.post(path, raw if raw is not None else body, token=token,
                         query_token=query_token)
        if status is not None:
            self.assertEqual(ans.status, status, ans)
        if code is not None:
            self.assertEqual(ans.json.get("err_code"), code, ans)
        if path == "/metrics":
            self.assertIn("text/plain", ans.headers.get("Content-Type"))
            schema = answer_schema(self.openapi, method, path, ans.status, "text/plain")
            self.assertEqual(validate(ans.raw, schema, self.openapi), [])
            return ans
        self.assertIsNotNone(ans.json, ans)
        errors = validate(ans.json, answer_schema(self.openapi, method, path, ans.status),
                          self.openapi)
        self.assertEqual(errors, [], "%s %s -> %r" % (method, path, ans))
        if method == "POST":
            self.assertTrue(ans.headers.get("X-Request-Id"))
        return ans

    def test_4_answers_match_schema(self):
        send, redirect = "/sendResponses", "/redirectMemberToNode"
        t = self.stok
        text = [{"type": "TEXT", "text": "hi"}]
        # sendResponses: successes
        a = self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1", "response": text},
                       200, t)
        self.assertEqual(a.json["sendResult"]["ok"], 1)
        a = self.check("POST", send, {"channelId": "S-fb", "recipientId": "psid-s9",
                                      "responses": text + [{"type": "IMAGE",
                                                            "url": "https://e.example/i.png"}]},
                       200, query_token=t)
        self.assertEqual(len(a.json["sendResult"]["result"]), 2)
        a = self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1",
                                      "response": text + [{"type": "TEXT",
                                                           "text": "ratelimit613"}]}, 200, t)
        self.assertEqual(a.json["sendResult"]["result"][1]["error"]["err_code"], 120)
        a = self.check("POST", send, {"channelId": "S-cloud", "memberId": "S-c1", "response": [
            {"type": "TEMPLATE", "elementName": "x", "languageCode": "en", "components": []},
            {"type": "TEXT", "text": "fail5xx later"}]}, 200, t)
        self.assertEqual(a.json["sendResult"]["result"][1]["error"]["err_code"], 113)
        # sendResponses: failures
        unauthorized = {"ok": 0, "err": "User is not authorized", "error": "User is not authorized"}
        a = self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1", "response": text},
                       500)
        self.assertEqual(a.json, unauthorized)
        a = self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1", "response": text},
                       500, "no-such-token")
        self.assertEqual(a.json, unauthorized)
        self.check("POST", send, raw=b"not json", status=500, token=t, code=108)
        self.check("POST", send, raw=b"[1]", status=500, token=t, code=108)
        self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1"}, 500, t, code=108)
        self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1",
                                  "response": [{"type": "TEXT"}]}, 500, t, code=108)
        self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1",
                                  "response": [{"type": "POLL"}]}, 500, t, code=117)
        self.check("POST", send, {"channelId": "nope", "memberId": "S-m1", "response": text},
                   500, t, code=112)
        self.check("POST", send, {"channelId": "C1", "memberId": "M1", "response": text},
                   500, t, code=112)  # the examples' channel, another app
        self.check("POST", send, {"channelId": "S-fb", "memberId": "nobody", "response": text},
                   500, t, code=114)
        self.check("POST", send, {"channelId": "S-off", "memberId": "S-m1", "response": text},
                   500, t, code=116)
        self.check("POST", send, {"channelId": "S-odd", "recipientId": "x", "response": text},
                   500, t, code=117)
        self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1", "response": [
            {"type": "TEMPLATE", "elementName": "x", "languageCode": "en"}]}, 500, t, code=117)
        self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1",
                                  "response": text * 51}, 500, t, code=118)
        self.check("POST", send, {"channelId": "S-fb", "memberId": "m" * 257,
                                  "response": text}, 500, t, code=118)
        self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1",
                                  "response": [{"type": "TEXT", "text": "x" * 65537}]},
                   500, t, code=118)
        big = json.dumps({"channelId": "S-fb", "memberId": "S-m1",
                          "response": [{"type": "TEXT", "text": "x" * 60000}] * 20}).encode()
        self.assertGreater(len(big), 1024 * 1024)
        self.check("POST", send, raw=big, status=413, token=t, code=118)
        self.check("POST", send, {"channelId": "S-fb", "memberId": "S-bad", "response": text},
                   500, t, code=104)
        self.check("POST", send, {"channelId": "S-cloud", "memberId": "S-c2", "response": text},
                   500, t, code=100)
        self.check("POST", send, {"channelId": "S-cloud", "memberId": "S-c1",
                                  "response": [{"type": "TEXT", "text": "fail5xx"}]},
                   500, t, code=113)
        # redirectMemberToNode
        a = self.check("POST", redirect, {"channelId": "S-fb", "memberId": "S-m1",
                                          "redirect": {"tree": "S-T", "nodeCompositeId": "N1"},
                                          "meta": {"a": 1}}, 200, t)
        codes = [e.get("error", {}).get("err_code") for e in a.json["sendResult"]["result"]]
        self.assertEqual(codes, [None, 117, 117, 115], a)
        self.check("POST", redirect, {"channelId": "S-fb", "recipientId": "psid-s10",
                                      "redirect": {"tree": "S-T", "nodeCompositeId": "N1",
                                                   "runPreAction": False,
                                                   "sendResponse": False,
                                                   "runPostAction": None}}, 200, t)
        self.check("POST", redirect, {"channelId": "S-fb", "memberId": "S-m1",
                                      "redirect": {"tree": "S-T", "nodeCompositeId": "N9"}},
                   500, t, code=115)
        self.check("POST", redirect, {"channelId": "S-fb", "memberId": "S-m1",
                                      "redirect": {"tree": "T1", "nodeCompositeId": "shipped"}},
                   500, t, code=115)  # the examples' tree: another app's
        self.check("POST", redirect, {"channelId": "S-fb", "memberId": "S-m1"}, 500, t, code=108)
        self.check("POST", redirect, {"channelId": "S-fb", "memberId": "S-m1",
                                      "redirect": {"tree": "S-T", "nodeCompositeId": "N1",
                                                   "sendResponse": "yes"}}, 500, t, code=108)
        self.check("POST", redirect, {"channelId": "S-fb", "memberId": "S-m1",
                                      "redirect": {"tree": "S-T", "nodeCompositeId": "N1"},
                                      "meta": []}, 500, t, code=108)
        self.check("POST", redirect, {"channelId": "S-fb", "memberId": "S-bad",
                                      "redirect": {"tree": "S-T", "nodeCompositeId": "N1"}},
                   500, t, code=104)
        self.check("POST", redirect, {"channelId": "S-off", "memberId": "S-m1",
                                      "redirect": {"tree": "S-T", "nodeCompositeId": "N1"}},
                   500, t, code=116)
        self.check("POST", redirect, raw=big, status=413, token=t, code=118)
        a = self.check("POST", redirect, {"channelId": "S-fb", "memberId": "S-m1",
                                          "redirect": {"tree": "S-T", "nodeCompositeId": "N1"}},
                       500, self.send_only)
        self.assertEqual(a.json, unauthorized)
        # the GET endpoints
        self.check("GET", "/healthz", status=200)
        self.check("GET", "/readyz", status=200)
        self.check("GET", "/metrics", status=200)
        # Redis gone: 119 and /readyz 503 (last: the data is gone with it)
        self.s.stop_redis()
        try:
            self.check("POST", send, {"channelId": "S-fb", "memberId": "S-m1",
                                      "response": text}, 500, t, code=119)
            self.check("POST", redirect, {"channelId": "S-fb", "memberId": "S-m1",
                                          "redirect": {"tree": "S-T", "nodeCompositeId": "N1"}},
                       500, t, code=119)
            wait_for(lambda: http("GET", self.s.url + "/readyz").status == 503,
                     what="/readyz 503 without Redis")
            self.check("GET", "/readyz", status=503)
            self.check("GET", "/healthz", status=200)
        finally:
            self.s.start_redis()


if __name__ == "__main__":
    unittest.main()
