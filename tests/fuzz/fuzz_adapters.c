/* fuzz_adapters.c - libFuzzer target for platform answers: every parse function of the six
 * adapters (adapters/) on any HTTP status and body.
 *
 * Input: byte 0 picks the call, the rest is the answer.
 *   adapter = b0 % 6      (facebook, whatsapp, whatsapp-cloud, slack, wechat, teamwork)
 *   kind    = b0 / 6 % 4  (send, cred, check, upload; parse_send where the adapter has no such
 *                          call)
 *   status  = statuses[b0 / 24]
 *   the body runs to the first NUL; the text after it, if any, is the Retry-After header.
 * For an upload, the body and that text are also a downloaded image and its Content-Type, given
 * to build_upload (wechat's multipart body must frame any data).
 * The channel's info holds a recognisable value in every secret field (interface.md), and no
 * answer may bring one of them into res.error. */
#include "fuzz_util.h"

#include "adapters/adapter.h"

enum { KIND_SEND, KIND_CRED, KIND_CHECK, KIND_UPLOAD };

static const long statuses[] = {0, 200, 201, 299, 302, 400, 401, 404, 429, 500, 503};

static const char *const types[] = {"facebook", "whatsapp", "whatsapp-cloud",
                                    "slack",    "wechat",   "teamwork"};

/* Per platform: its info object (secret fields as interface.md marks them, plus what the
 * adapter reads) and the member's address. The secrets carry '+', '/' and '=' so that their
 * percent-encoded form differs from the stored one. */
static const struct {
    const char *info, *to;
    const char *secrets[7];
} channels[] = {
    {"{\"accessToken\":\"EAAB+fbSecret/Page=Token1\",\"pageId\":\"1122334455\"}",
     "2345678901234567",
     {"accessToken", NULL}},
    {"{\"adminAuthToken\":\"eyJwa.AdminSecret+Token/2=\",\"adminPassword\":\"wa-Adm1n+Pass/word3\","
     "\"adminUsername\":\"admin\",\"apiPath\":\"https://wa.example:9090\",\"waId\":\"85290000000\","
     "\"adminAuthTokenExpiry\":1900000000000}",
     "85291234567",
     {"adminAuthToken", "adminPassword", NULL}},
    {"{\"accessToken\":\"EAAG+CloudSecret/Token=4\",\"phoneNumberId\":\"1098765\","
     "\"wabaId\":\"5550001\"}",
     "85291234567",
     {"accessToken", NULL}},
    {"{\"botAccessToken\":\"xoxb-SlackBot+Secret/5=\",\"accessToken\":\"xoxp-SlackUser+Secret/6\","
     "\"appAccessToken\":\"xapp-SlackApp+Secret/7\",\"signingSecret\":\"slackSigning+Secret/8\","
     "\"token\":\"slackVerify+Token/9\",\"webhookToken\":\"slackHook+Token/10\","
     "\"botId\":\"B0001\",\"teamId\":\"T0001\"}",
     "D0123456",
     {"botAccessToken", "accessToken", "appAccessToken", "signingSecret", "token", "webhookToken",
      NULL}},
    {"{\"accessToken\":\"wxAccess+Token/Secret=11\",\"appsecret\":\"wxApp+Secret/12\","
     "\"JSAPITicket\":\"wxTicket+Secret/13\",\"appId\":\"wx0123456789\","
     "\"botOpenId\":\"gh_0123\",\"accessTokenExpiry\":1900000000000}",
     "oUser-openid-0123",
     {"accessToken", "appsecret", NULL}},
    {"{\"apiKey\":\"twApi+Key/Secret=14\",\"apiToken\":\"twApi+Token/Secret=15\","
     "\"moduleKey\":\"twModule+Key/Secret=16\",\"tbId\":\"tb-bot-1\"}",
     "user-0123",
     {"apiKey", "apiToken", "moduleKey", NULL}},
};

#define NPLATFORMS (sizeof(types) / sizeof(types[0]))

static json_t *infos[NPLATFORMS];

static void check_no_secret(size_t p, const char *text, const char *what)
{
    for (size_t i = 0; channels[p].secrets[i] != NULL; i++) {
        const char *secret = json_string_value(json_object_get(infos[p], channels[p].secrets[i]));
        char *enc = adapter_urlencode(secret);
        FUZZ_CHECK(strstr(text, secret) == NULL, "%s: %s shows %s: %s", types[p], what,
                   channels[p].secrets[i], text);
        FUZZ_CHECK(strstr(text, enc) == NULL, "%s: %s shows %s encoded: %s", types[p], what,
                   channels[p].secrets[i], text);
        free(enc);
    }
}

static void check_result(size_t p, int kind, const adapter_result_t *res)
{
    const char *t = types[p];

    FUZZ_CHECK(res->status >= ADAPTER_OK && res->status <= ADAPTER_WINDOW_CLOSED, "%s: status %d",
               t, (int)res->status);
    FUZZ_CHECK(fuzz_buf_ok(res->error, sizeof(res->error)), "%s: error not valid UTF-8", t);
    FUZZ_CHECK(fuzz_buf_ok(res->message_id, sizeof(res->message_id)), "%s: message_id", t);
    FUZZ_CHECK(fuzz_buf_ok(res->chat_id, sizeof(res->chat_id)), "%s: chat_id", t);
    FUZZ_CHECK(fuzz_buf_ok(res->ref, sizeof(res->ref)), "%s: ref", t);
    FUZZ_CHECK(res->retry_after_s >= -1, "%s: retry_after_s %d", t, res->retry_after_s);
    FUZZ_CHECK(res->meta == NULL || json_is_object(res->meta), "%s: meta is not an object", t);
    if (res->status == ADAPTER_OK) {
        FUZZ_CHECK(res->error[0] == '\0', "%s: success with an error: %s", t, res->error);
        FUZZ_CHECK((kind != KIND_CHECK && kind != KIND_UPLOAD) || res->ref[0] != '\0',
                   "%s: check or upload success without ref", t);
    } else {
        FUZZ_CHECK(res->error[0] != '\0', "%s: failure %d without a reason", t, (int)res->status);
    }
    check_no_secret(p, res->error, "error");
}

/* The multipart body of an upload: head, the data untouched, tail; the boundary is nowhere in
 * the data and the head is the only place a header line ends. */
static void check_upload(size_t p, const adapter_ops_t *ops, const adapter_target_t *t,
                         const char *data, size_t len, const char *content_type)
{
    adapter_call_t call;
    adapter_result_t res;
    const char *ct = NULL, *b;
    char boundary[80], tail[96];
    size_t blen, hlen, tlen;

    memset(&call, 0, sizeof(call));
    adapter_result_init(&res);
    if (ops->build_upload(t, data, len, content_type, &call, &res) < 0) {
        check_result(p, KIND_SEND, &res);
        FUZZ_CHECK(res.status != ADAPTER_OK && call.body == NULL && call.url == NULL,
                   "failed upload keeps a call");
        return;
    }
    for (int i = 0; i < ADAPTER_MAX_HEADERS && call.headers[i]; i++) {
        FUZZ_CHECK(strpbrk(call.headers[i], "\r\n") == NULL, "upload header with a newline");
        if (strncmp(call.headers[i], "Content-Type: multipart/form-data; boundary=", 44) == 0)
            ct = call.headers[i] + 44;
    }
    FUZZ_CHECK(ct != NULL && *ct != '\0' && strlen(ct) < 70, "upload without its boundary");
    blen = strlen(ct);
    snprintf(boundary, sizeof(boundary), "--%s\r\n", ct);
    tlen = (size_t)snprintf(tail, sizeof(tail), "\r\n--%s--\r\n", ct);
    FUZZ_CHECK(call.body != NULL && call.body_len >= strlen(boundary) + len + tlen,
               "upload body too short");
    FUZZ_CHECK(memcmp(call.body, boundary, strlen(boundary)) == 0, "upload body start");
    b = memmem(call.body, call.body_len, "\r\n\r\n", 4); /* the end of the part head */
    FUZZ_CHECK(b != NULL, "upload part without a head");
    hlen = (size_t)(b + 4 - call.body);
    FUZZ_CHECK(call.body_len == hlen + len + tlen, "upload body length");
    FUZZ_CHECK(memcmp(call.body + hlen, data, len) == 0, "upload data changed");
    FUZZ_CHECK(memcmp(call.body + hlen + len, tail, tlen) == 0, "upload body end");
    FUZZ_CHECK(memmem(data, len, ct, blen) == NULL, "the boundary is in the data");
    /* The boundary line, Content-Disposition and Content-Type (whose line end is at b): a
     * content type cannot add a line. */
    {
        size_t lines = 0;
        for (const char *q = call.body; q < b; q++)
            lines += q[0] == '\r' && q[1] == '\n';
        FUZZ_CHECK(lines == 2, "upload part head has %zu lines", lines + 1);
    }
    adapter_call_free(&call);
    adapter_result_clear(&res);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    json_object_seed(1);
    for (size_t p = 0; p < NPLATFORMS; p++) {
        infos[p] = json_loads(channels[p].info, 0, NULL);
        if (infos[p] == NULL || adapter_find(types[p]) == NULL)
            abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const adapter_ops_t *ops;
    adapter_target_t t;
    adapter_answer_t a;
    adapter_result_t res;
    const uint8_t *nul;
    char *body, *retry = NULL;
    size_t p, blen;
    int kind, sel;

    if (size < 1)
        return 0;
    sel = data[0];
    p = (size_t)sel % NPLATFORMS;
    kind = sel / (int)NPLATFORMS % 4;
    ops = adapter_find(types[p]);
    data++;
    size--;
    nul = memchr(data, '\0', size);
    blen = nul ? (size_t)(nul - data) : size;
    body = fuzz_strndup(data, blen);
    if (nul != NULL)
        retry = fuzz_strndup(nul + 1, size - blen - 1);

    memset(&t, 0, sizeof(t));
    t.base_url = "https://platform.example/api";
    t.info = infos[p];
    t.to = channels[p].to;
    t.now_ms = FUZZ_NOW;
    memset(&a, 0, sizeof(a));
    a.status = statuses[(size_t)sel / (NPLATFORMS * 4) % (sizeof(statuses) / sizeof(statuses[0]))];
    a.body = body;
    a.body_len = blen;
    a.retry_after = retry;
    a.content_type = "application/json";
    adapter_result_init(&res);

    if (kind == KIND_CRED && ops->parse_cred != NULL) {
        json_t *cred = ops->parse_cred(&t, &a, &res);
        FUZZ_CHECK((cred != NULL) == (res.status == ADAPTER_OK), "%s: cred %p with status %d",
                   types[p], (void *)cred, (int)res.status);
        if (cred != NULL) {
            json_t *info = json_deep_copy(infos[p]);
            FUZZ_CHECK(json_is_object(cred), "%s: cred is not an object", types[p]);
            FUZZ_CHECK(adapter_info_str(cred, ops->cred_field) != NULL, "%s: cred without %s",
                       types[p], ops->cred_field);
            fuzz_json_roundtrip(cred, "cred");
            /* What the store merges into the channel's info. */
            FUZZ_CHECK(json_object_update(info, cred) == 0, "%s: cred does not merge", types[p]);
            (void)ops->cred_needs_refresh(info, FUZZ_NOW);
            json_decref(info);
            json_decref(cred);
        }
    } else if (kind == KIND_CHECK && ops->parse_check != NULL) {
        ops->parse_check(&t, &a, &res);
    } else if (kind == KIND_UPLOAD && ops->parse_upload != NULL) {
        ops->parse_upload(&t, &a, &res);
        check_upload(p, ops, &t, body, blen, retry);
    } else {
        kind = KIND_SEND;
        ops->parse_send(&t, &a, &res);
    }
    check_result(p, kind, &res);
    (void)adapter_err_code(ops, res.status);
    adapter_result_clear(&res);
    FUZZ_CHECK(res.meta == NULL, "adapter_result_clear kept meta");
    free(body);
    free(retry);
    return 0;
}
