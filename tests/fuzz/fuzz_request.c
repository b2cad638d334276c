/* fuzz_request.c - libFuzzer target for what a client sends: the bodies of both operations
 * (core/request.c), the token in the Authorization header (core/auth.c) and, as a small extra,
 * the SSRF guard's reading of an address text (net/netguard.c).
 *
 * The whole input is one request body, given to request_parse_send and to
 * request_parse_redirect. Its text up to the first NUL (or all of it) is also an Authorization
 * header value and, cut at 64 bytes, an address for netguard_blocked_text. */
#include "fuzz_util.h"

#include "adapters/adapter.h"
#include "core/auth.h"
#include "net/netguard.h"
#include "core/request.h"

#include <arpa/inet.h>
#include <strings.h>

/* A request id: what get_id() lets through into the Redis keys. */
static void check_id(const char *s, const json_t *root, const char *key, const char *what)
{
    FUZZ_CHECK(s != NULL && *s != '\0', "%s: empty id", what);
    FUZZ_CHECK(s == json_string_value(json_object_get(root, key)), "%s: not borrowed from body",
               what);
    FUZZ_CHECK(strlen(s) <= REQUEST_MAX_ID, "%s: %zu bytes", what, strlen(s));
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        FUZZ_CHECK(*p >= 0x20 && *p != 0x7f && *p != '{' && *p != '}', "%s: byte 0x%02x", what, *p);
}

static void check_target(const request_target_t *t, const json_t *root)
{
    char phone[REQUEST_MAX_ID + 1];
    static const size_t sizes[] = {1, 2, 8, sizeof(phone)};

    check_id(t->channel_id, root, "channelId", "channelId");
    FUZZ_CHECK(t->member_id != NULL || t->recipient_id != NULL, "no member and no recipient");
    if (t->member_id != NULL)
        check_id(t->member_id, root, "memberId", "memberId");
    if (t->recipient_id == NULL)
        return;
    check_id(t->recipient_id, root, "recipientId", "recipientId");
    /* The whatsapp kinds normalise the recipient into buffers of their own size. */
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        memset(phone, 'x', sizeof(phone));
        request_normalize_phone(t->recipient_id, phone, sizes[i]);
        FUZZ_CHECK(memchr(phone, '\0', sizes[i]) != NULL, "phone not terminated in %zu", sizes[i]);
        FUZZ_CHECK(strpbrk(phone, "+-() ") == NULL, "phone keeps a separator: %s", phone);
    }
}

/* A response every check took is built by every platform that has it: a call with a body (or,
 * for a response the platform lacks, its fallback). Nothing a valid response holds may make an
 * adapter fail or crash. */
static void check_platforms(const json_t *resp)
{
    static const char *const types[] = {"facebook", "whatsapp", "whatsapp-cloud",
                                        "slack",    "wechat",   "teamwork"};
    json_t *info = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "accessToken", "tok", "apiPath",
                             "https://wa.example", "adminAuthToken", "adm", "phoneNumberId", "1",
                             "botAccessToken", "xoxb", "apiKey", "k", "appId", "wx");
    adapter_target_t t = {
        .base_url = "https://platform.example", .info = info, .to = "85291234567"};

    for (size_t p = 0; p < sizeof(types) / sizeof(types[0]); p++) {
        const adapter_ops_t *ops = adapter_find(types[p]);
        const json_t *sent = resp;
        adapter_call_t call;
        adapter_result_t res;
        char msg[200];
        int code = adapter_check_response(ops, resp, msg, sizeof(msg));

        if (code == BG_ERR_UNSUPPORTED && json_object_get(resp, "fallback") != NULL) {
            sent = json_object_get(resp, "fallback");
            code = adapter_check_response(ops, sent, msg, sizeof(msg));
        }
        FUZZ_CHECK(code == 0 || code == BG_ERR_UNSUPPORTED || code == BG_ERR_LIMIT ||
                       code == BG_ERR_MISSING_PARAM,
                   "%s: check code %d", types[p], code);
        if (code != 0)
            continue;
        adapter_result_init(&res);
        memset(&call, 0, sizeof(call));
        FUZZ_CHECK(ops->build_send(&t, sent, "media-1", &call, &res) == 0 && call.body != NULL,
                   "%s: a checked response was not built: %s", types[p], res.error);
        {
            json_t *body = json_loadb(call.body, call.body_len, 0, NULL);
            FUZZ_CHECK(json_is_object(body), "%s: the body is not a JSON object", types[p]);
            json_decref(body);
        }
        adapter_call_free(&call);
        adapter_result_clear(&res);
    }
    json_decref(info);
}

static void check_send(const uint8_t *data, size_t size)
{
    send_request_t req;
    bg_error_t err;
    const json_t *resp;
    size_t i;

    memset(&err, 0, sizeof(err));
    if (request_parse_send((const char *)data, size, &req, &err) < 0) {
        FUZZ_CHECK(req.root == NULL && req.responses == NULL, "failed send parse keeps its body");
        fuzz_check_error(&err, "sendResponses");
        return;
    }
    FUZZ_CHECK(json_is_object(req.root), "send root is not an object");
    check_target(&req.target, req.root);
    FUZZ_CHECK(json_is_array(req.responses), "responses is not an array");
    FUZZ_CHECK(req.responses == json_object_get(req.root, "response") ||
                   req.responses == json_object_get(req.root, "responses"),
               "responses not taken from the body");
    FUZZ_CHECK(json_array_size(req.responses) >= 1 &&
                   json_array_size(req.responses) <= REQUEST_MAX_RESPONSES,
               "%zu responses", json_array_size(req.responses));
    json_array_foreach(req.responses, i, resp) {
        const char *type = json_string_value(json_object_get(resp, "type"));
        FUZZ_CHECK(request_check_response(resp, "response", &err) == 0,
                   "response[%zu] accepted by the parse, refused alone", i);
        FUZZ_CHECK(adapter_response_type(type) != 0, "response[%zu] of an unknown type passed", i);
        check_platforms(resp);
    }
    request_send_free(&req);
    FUZZ_CHECK(req.root == NULL, "request_send_free left the root");
}

static void check_redirect(const uint8_t *data, size_t size)
{
    redirect_request_t req;
    bg_error_t err;

    memset(&err, 0, sizeof(err));
    if (request_parse_redirect((const char *)data, size, &req, &err) < 0) {
        FUZZ_CHECK(req.root == NULL && req.meta == NULL, "failed redirect parse keeps its body");
        fuzz_check_error(&err, "redirectMemberToNode");
        return;
    }
    FUZZ_CHECK(json_is_object(req.root), "redirect root is not an object");
    check_target(&req.target, req.root);
    check_id(req.tree, json_object_get(req.root, "redirect"), "tree", "redirect.tree");
    check_id(req.node_id, json_object_get(req.root, "redirect"), "nodeCompositeId",
             "redirect.nodeCompositeId");
    FUZZ_CHECK((req.run_pre == 0 || req.run_pre == 1) &&
                   (req.send_response == 0 || req.send_response == 1) &&
                   (req.run_post == 0 || req.run_post == 1),
               "flags %d %d %d", req.run_pre, req.send_response, req.run_post);
    FUZZ_CHECK(json_is_object(req.meta) && req.meta == json_object_get(req.root, "meta"),
               "meta is not the body's object");
    request_redirect_free(&req);
    FUZZ_CHECK(req.root == NULL, "request_redirect_free left the root");
}

/* The text up to the first NUL as an Authorization header value, the rest as the query's
 * accessToken. */
static void check_token_header(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t hlen = nul ? (size_t)(nul - data) : size;
    char *header = fuzz_strndup(data, hlen);
    char *query = nul ? fuzz_strndup(nul + 1, size - hlen - 1) : NULL;
    size_t len = 0;
    const char *tok = auth_request_token(header, query, nul ? size - hlen - 1 : 0, &len);

    if (tok != NULL) {
        FUZZ_CHECK(len > 0 && len <= strlen(tok), "token length %zu", len);
        if (tok >= header && tok < header + hlen) {
            FUZZ_CHECK(strncasecmp(header, "Bearer ", 7) == 0, "token from a non-Bearer header");
            FUZZ_CHECK(tok[0] != ' ' && tok[len - 1] != ' ', "token keeps its spaces");
        } else {
            FUZZ_CHECK(tok == query, "token points outside both inputs");
        }
        if (len <= AUTH_TOKEN_MAX) {
            char hex[AUTH_HASH_HEX];
            auth_hash_token(tok, len, hex);
            FUZZ_CHECK(strlen(hex) == 64 && strspn(hex, "0123456789abcdef") == 64, "hash %s", hex);
        }
    }
    free(header);
    free(query);
}

/* An IPv4 address must be judged the same in every IPv6 form that carries it. */
static void check_netguard(const uint8_t *data, size_t size)
{
    char text[65], v6[96];
    struct in_addr a4;
    struct in6_addr a6;
    size_t n = strnlen((const char *)data, size < 64 ? size : 64);
    int blocked;

    memcpy(text, data, n);
    text[n] = '\0';
    blocked = netguard_blocked_text(text);
    FUZZ_CHECK(blocked == 0 || blocked == 1, "netguard answered %d", blocked);
    if (inet_pton(AF_INET, text, &a4) == 1) {
        const uint8_t *b = (const uint8_t *)&a4.s_addr;
        static const char *const forms[] = {"::ffff:%s", "64:ff9b::%s"};
        for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
            snprintf(v6, sizeof(v6), forms[i], text);
            FUZZ_CHECK(netguard_blocked_text(v6) == blocked, "%s judged unlike %s", v6, text);
        }
        snprintf(v6, sizeof(v6), "2002:%02x%02x:%02x%02x::1", b[0], b[1], b[2], b[3]);
        FUZZ_CHECK(netguard_blocked_text(v6) == blocked, "6to4 %s judged unlike %s", v6, text);
    } else if (inet_pton(AF_INET6, text, &a6) != 1) {
        FUZZ_CHECK(blocked == 1, "not an address, yet allowed: %s", text);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    json_object_seed(1); /* the same hash order in every run, so findings reproduce */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_send(data, size);
    check_redirect(data, size);
    check_token_header(data, size);
    check_netguard(data, size);
    return 0;
}
