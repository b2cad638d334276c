/* fuzz_records.c - libFuzzer target for what other systems write into Redis (contract.md 3) and
 * botgate decodes: token, channel and member records, member deltas, tree files and nodes.
 *
 * The input is parsed as store.c parses a reply (json_loadb, flags 0) and then used as each of:
 *   - a token record (auth_token_decode);
 *   - a channel record (its info given to the adapter's build calls, its ids to the keys);
 *   - a member record (the compare-and-set write-back, and a node run for it);
 *   - a member delta applied to a valid member (member_apply_delta, member_apply_op);
 *   - a tree file (tree_validate), and the tree the node run fetches its nodes from;
 *   - a node: the answer to every NEED_NODE of a run (whose target ids are long and
 *     multi-byte, as a request may send them).
 * Node runs are driven like the gateway does: sends answered with ok elements (every third
 * with a failure), webhooks alternately answered with a JSON answer and with a failure. A run
 * must end within a bound that the input's size sets; its delta, applied to the member it
 * started from, must give the member the run ended with. */
#include "fuzz_util.h"

#include "adapters/adapter.h"
#include "core/auth.h"
#include "core/member.h"
#include "core/node.h"
#include "core/result.h"
#include "core/tmpl.h"
#include "core/tree.h"
#include "core/window.h"
#include "json/jscan.h"
#include "json/jsonw.h"
#include "script/script.h"
#include "store/keys.h"

#define STEPS_MAX 1000 /* the harness stops driving a run here; not a finding by itself */

/* Ids as long as a request may send (256 bytes), in three-byte characters: every message that
 * quotes them cut to a fixed width cuts one in the middle. */
#define LONG_TREE                                                                                  \
    "T-\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9"                   \
    "\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9"                     \
    "\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9"                     \
    "\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9\xe6\xa8\xb9"
#define LONG_NODE                                                                                  \
    "N-\xe7\xaf\x80\xe9\xbb\x9e\xe7\xaf\x80\xe9\xbb\x9e\xe7\xaf\x80\xe9\xbb\x9e"                   \
    "\xe7\xaf\x80\xe9\xbb\x9e\xe7\xaf\x80\xe9\xbb\x9e\xe7\xaf\x80\xe9\xbb\x9e"                     \
    "\xe7\xaf\x80\xe9\xbb\x9e\xe7\xaf\x80\xe9\xbb\x9e\xe7\xaf\x80\xe9\xbb\x9e"                     \
    "\xe7\xaf\x80\xe9\xbb\x9e\xe7\xaf\x80\xe9\xbb\x9e\xe7\xaf\x80\xe9\xbb\x9e"

/* A tree with templates on every member field, locales, every action and a redirect chain
 * that ends on a node that does not exist: the run for a member record under test. */
static const char default_tree_text[] =
    "{\"_id\":\"T1\",\"app\":\"A1\",\"name\":\"fuzz\",\"nodes\":{"
    "\"N1\":{\"name\":\"start\",\"preAction\":["
    "{\"type\":\"set\",\"path\":\"member.meta.seen\",\"value\":\"{{member.firstName}} "
    "{{member.meta}}\"},"
    "{\"type\":\"set\",\"path\":\"member.customLocale\",\"value\":\"{{member.locale}}\"},"
    "{\"type\":\"addTags\",\"tags\":[\"t-{{member.platform}}\",\"{{member.externalId}}\"]},"
    "{\"type\":\"webhook\",\"url\":\"https://hook.example/{{member._id}}?c={{member.channel}}\","
    "\"body\":{\"m\":\"{{member}}\"},\"saveAs\":\"hook\"}],"
    "\"response\":[{\"type\":\"TEXT\",\"text\":\"Hi {{member.firstName}} "
    "{{member.botMeta.tempData.hook}}\"}],"
    "\"responseByLocale\":{\"en\":[{\"type\":\"TEXT\",\"text\":\"en {{member.tags}}\"}],"
    "\"zh-HK\":[{\"type\":\"IMAGE\",\"url\":\"https://img.example/{{member.meta.x}}\"}]},"
    "\"postAction\":[{\"type\":\"removeTags\",\"tags\":[\"{{member.tags.0}}\"]},"
    "{\"type\":\"set\",\"path\":\"member.botMeta.subscribed\",\"value\":"
    "\"{{member.botMeta.subscribed}}\"}],"
    "\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N2\",\"sendResponse\":false}},"
    "\"N2\":{\"preAction\":[{\"type\":\"set\",\"path\":\"member.botMeta.tempData.{{member.meta.k}}"
    "\","
    "\"value\":1}],\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"{{member.meta.next}}\"}}}}";

static const char fixed_delta_text[] =
    "[{\"op\":\"set\",\"path\":\"member.meta.a.b\",\"value\":1},"
    "{\"op\":\"addTags\",\"tags\":[\"x\",\"y\",\"\"]},{\"op\":\"removeTags\",\"tags\":[\"y\"]},"
    "{\"op\":\"set\",\"path\":\"member.botMeta.subscribed\",\"value\":\"false\"},"
    "{\"op\":\"position\",\"tree\":\"T1\",\"node\":\"N1\"}]";

static json_t *default_tree, *fixed_delta, *default_member, *default_channel, *default_meta;

/* Where a run gets its nodes: a tree's nodes object, or one node for every fetch. */
typedef struct source {
    const json_t *tree; /* a tree file: nodes looked up by tree id and node id */
    const json_t *node; /* else this node answers every fetch */
    size_t bound;       /* the most needs a run of this source can ask */
    int valid;          /* the tree passed tree_validate */
} source_t;

static size_t count_braces(const char *s, size_t n)
{
    size_t c = 0;

    for (size_t i = 0; i < n; i++)
        c += s[i] == '{';
    return c;
}

static json_t *fetch(const source_t *src, const char *tree, const char *node_id)
{
    const char *id;

    if (src->tree == NULL)
        return json_deep_copy(src->node);
    id = json_string_value(json_object_get(src->tree, "_id"));
    if (id == NULL || strcmp(id, tree) != 0)
        return NULL;
    return json_deep_copy(json_object_get(json_object_get(src->tree, "nodes"), node_id));
}

static void check_hook(const json_t *hook)
{
    const char *url = json_string_value(json_object_get(hook, "url"));
    const char *method = json_string_value(json_object_get(hook, "method"));
    const json_t *timeout = json_object_get(hook, "timeoutMs");
    const json_t *save_as = json_object_get(hook, "saveAs");

    FUZZ_CHECK(json_is_object(hook), "webhook need is not an object");
    FUZZ_CHECK(url != NULL && (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0),
               "webhook url %.200s", url ? url : "(null)");
    FUZZ_CHECK(method != NULL && (strcmp(method, "GET") == 0 || strcmp(method, "POST") == 0),
               "webhook method");
    FUZZ_CHECK(json_is_integer(timeout) && json_integer_value(timeout) >= 1 &&
                   json_integer_value(timeout) <= NODE_WEBHOOK_TIMEOUT_MAX,
               "webhook timeoutMs");
    FUZZ_CHECK(json_object_get(hook, "body") != NULL, "webhook without body");
    FUZZ_CHECK(json_is_null(save_as) || json_is_string(save_as), "webhook saveAs");
    fuzz_json_roundtrip(hook, "webhook");
}

static void check_results(node_run_t *run)
{
    json_t *results = node_run_results(run), *el;
    int all_ok = 1;
    size_t i;

    FUZZ_CHECK(json_is_array(results), "results is not an array");
    json_array_foreach(results, i, el) {
        const json_t *ok = json_object_get(el, "ok"), *error = json_object_get(el, "error");
        FUZZ_CHECK(json_is_integer(ok) &&
                       (json_integer_value(ok) == 0 || json_integer_value(ok) == 1),
                   "result[%zu] ok", i);
        if (json_integer_value(ok) == 1)
            continue;
        all_ok = 0;
        FUZZ_CHECK(json_is_integer(json_object_get(error, "err_code")), "result[%zu] err_code", i);
        FUZZ_CHECK(json_is_string(json_object_get(error, "err")),
                   "result[%zu] error without err (message not a valid JSON string?)", i);
    }
    FUZZ_CHECK(node_run_ok(run) == all_ok, "node_run_ok %d, elements say %d", node_run_ok(run),
               all_ok);
    fuzz_json_roundtrip(results, "results");
    json_decref(results);
}

/* The write-back: the delta applied to the member the run started from gives the member the run
 * ended with (both completed by member_apply_delta, which adds missing parts and updatedAt). */
static void check_delta_replays(node_run_t *run, const json_t *member)
{
    json_t *replayed = json_is_object(member) ? json_deep_copy(member) : json_object();
    json_t *ended = json_deep_copy(node_run_member(run)), *none = json_array();
    const json_t *delta = node_run_delta(run);
    bg_error_t err;

    FUZZ_CHECK(json_is_array(delta), "delta is not an array");
    fuzz_json_roundtrip(delta, "delta");
    memset(&err, 0, sizeof(err));
    FUZZ_CHECK(member_apply_delta(replayed, delta, FUZZ_NOW, &err) == 0,
               "the run's delta does not apply to its member: %s", err.msg);
    FUZZ_CHECK(member_apply_delta(ended, none, FUZZ_NOW, &err) == 0, "empty delta refused");
    FUZZ_CHECK(json_equal(replayed, ended), "the delta replays into another member");
    fuzz_json_roundtrip(replayed, "written member");
    json_decref(replayed);
    json_decref(ended);
    json_decref(none);
}

static void drive(const source_t *src, const json_t *member, const char *tree, const char *node_id)
{
    node_flags_t flags = {1, 1, 1};
    node_run_t *run =
        node_run_new(member, default_channel, default_meta, tree, node_id, flags, FUZZ_NOW);
    size_t steps, sends = 0, hooks = 0, calls = 0;
    node_need_t need, again;
    node_step_t st = NODE_NEED_NODE;
    bg_error_t err;

    FUZZ_CHECK(run != NULL, "node_run_new failed");
    node_run_set_code(run, &script_nodecode, NULL);
    for (steps = 0; steps < STEPS_MAX; steps++) {
        /* a script's http.request calls are bounded by the script (SCRIPT_HTTP_MAX), not by
         * the shape of the input */
        FUZZ_CHECK(steps - calls <= src->bound, "run asked %zu times, more than its %zu needs",
                   steps - calls, src->bound);
        st = node_run_next(run, &need);
        FUZZ_CHECK(node_run_next(run, &again) == st && memcmp(&need, &again, sizeof(need)) == 0,
                   "asking again changed the need");
        if (st == NODE_DONE)
            break;
        if (st == NODE_NEED_NODE) {
            FUZZ_CHECK(need.tree != NULL && need.node_id != NULL && !need.response && !need.webhook,
                       "NEED_NODE fields");
            if (steps == 0) /* an outcome nobody asked for is ignored */
                node_run_send_done(run, json_object());
            node_run_node_loaded(run, fetch(src, need.tree, need.node_id));
        } else if (st == NODE_NEED_SEND) {
            json_t *ev;
            bg_error_t fail;
            FUZZ_CHECK(json_is_object(need.response) && !need.tree && !need.webhook,
                       "NEED_SEND fields");
            fuzz_json_roundtrip(need.response, "rendered response");
            ev = result_message_event("1122334455", "85291234567", need.response, FUZZ_NOW, "m1");
            if (++sends % 3 == 0) {
                bg_error_set(&fail, BG_ERR_PLATFORM, "platform said no");
                node_run_send_done(run, result_node_element(ev, &fail));
            } else {
                node_run_send_done(run, result_node_element(ev, NULL));
            }
        } else if (st == NODE_NEED_HTTP) {
            FUZZ_CHECK(json_is_object(need.http) && !need.tree && !need.response && !need.webhook,
                       "NEED_HTTP fields");
            if (calls++ % 2 == 0)
                node_run_http_done(run, 200, "{\"v\":1}", 7, "application/json", NULL);
            else
                node_run_http_done(run, 0, NULL, 0, NULL, "timed out");
        } else {
            FUZZ_CHECK(st == NODE_NEED_WEBHOOK && !need.tree && !need.response, "step %d", st);
            check_hook(need.webhook);
            if (hooks++ % 2 == 0) {
                json_t *results = node_run_results(run);
                size_t before = json_array_size(results);
                node_run_webhook_done(run, 1,
                                      json_pack("{s:O?,s:i}", "echo",
                                                json_object_get(need.webhook, "body"), "n",
                                                (int)hooks));
                /* What tree import accepted must work: an answer is always saved. */
                FUZZ_CHECK(!src->valid || json_array_size(results) == before,
                           "a webhook answer of a valid tree was not saved: %s",
                           json_string_value(json_object_get(
                               json_object_get(json_array_get(results, before), "error"), "err")));
                json_decref(results);
            } else {
                node_run_webhook_done(run, 0, NULL);
            }
        }
    }
    if (st == NODE_DONE) {
        check_results(run);
        if (node_run_error(run, &err)) {
            fuzz_check_error(&err, "node run");
            FUZZ_CHECK(json_array_size(node_run_delta(run)) == 0, "a failed run has a delta");
        } else {
            check_delta_replays(run, member);
        }
    }
    node_run_free(run);
}

static void check_token(const json_t *rec)
{
    auth_token_t t;
    const char *first;

    if (auth_token_decode(rec, &t) < 0) {
        FUZZ_CHECK(t.channels == NULL, "refused token keeps channels");
        return;
    }
    FUZZ_CHECK(t.app != NULL && t.app[0] != '\0' && fuzz_buf_ok(t.app, AUTH_APP_MAX + 1),
               "token app");
    FUZZ_CHECK(t.record == rec, "token does not hold its record");
    FUZZ_CHECK((t.scopes & ~0xFu) == 0, "token scopes %x", t.scopes);
    FUZZ_CHECK(t.channels == NULL || json_is_array(t.channels), "token channels");
    if (json_object_get(rec, "expiresAt") != NULL &&
        !json_is_null(json_object_get(rec, "expiresAt")))
        FUZZ_CHECK(t.expires_at != 0, "an expiresAt decoded as never expiring");
    (void)auth_allows(&t, AUTH_ACCEPT_SEND, FUZZ_NOW);
    (void)auth_allows(&t, AUTH_ACCEPT_REDIRECT, INT64_MAX);
    first = json_string_value(json_array_get(t.channels, 0));
    if (first != NULL)
        FUZZ_CHECK(auth_sees_channel(&t, first, t.app), "token does not see its own channel");
    FUZZ_CHECK(!auth_sees_channel(&t, "C1", NULL), "token sees a channel of no app");
    auth_token_free(&t);
    FUZZ_CHECK(t.channels == NULL, "auth_token_free left channels");
}

static void check_key(int rc, const char *buf, size_t size)
{
    FUZZ_CHECK(rc == -1 || (rc >= 0 && (size_t)rc < size && strlen(buf) == (size_t)rc), "key rc %d",
               rc);
}

static void check_keys(const char *channel_id, const char *id)
{
    char big[STORE_KEY_MAX], small[24];

    if (channel_id == NULL || id == NULL)
        return;
    check_key(store_key_channel(big, sizeof(big), "botgate:", channel_id), big, sizeof(big));
    check_key(store_key_member(big, sizeof(big), "botgate:", channel_id, id), big, sizeof(big));
    check_key(store_key_member(small, sizeof(small), "botgate:", channel_id, id), small,
              sizeof(small));
    check_key(store_key_recipient(big, sizeof(big), "botgate:", channel_id, id), big, sizeof(big));
    check_key(store_key_cred_lock(big, sizeof(big), "botgate:", channel_id), big, sizeof(big));
}

static void check_call(int rc, adapter_call_t *call, adapter_result_t *res, const char *what)
{
    if (rc == 0) {
        FUZZ_CHECK(call->method != NULL && call->url != NULL, "%s: call without method or url",
                   what);
        for (int i = 0; i < ADAPTER_MAX_HEADERS && call->headers[i]; i++)
            FUZZ_CHECK(strpbrk(call->headers[i], "\r\n") == NULL, "%s: header with a newline",
                       what);
        FUZZ_CHECK(call->body != NULL || call->body_len == 0, "%s: body length", what);
        FUZZ_CHECK(res->status == ADAPTER_OK, "%s: built with status %d", what, (int)res->status);
    } else {
        FUZZ_CHECK(rc == -1 && res->status != ADAPTER_OK, "%s: rc %d status %d", what, rc,
                   (int)res->status);
        FUZZ_CHECK(res->error[0] != '\0' && fuzz_buf_ok(res->error, sizeof(res->error)),
                   "%s: failure reason", what);
    }
    adapter_call_free(call);
    adapter_result_clear(res);
}

static void check_channel(const json_t *rec)
{
    static const char *const responses[] = {
        "{\"type\":\"TEXT\",\"text\":\"hi\"}",
        "{\"type\":\"IMAGE\",\"url\":\"https://img.example/a.png\"}",
        "{\"type\":\"TEMPLATE\",\"elementName\":\"t\",\"languageCode\":\"en\",\"components\":[]}",
    };
    const adapter_ops_t *ops = adapter_find(json_string_value(json_object_get(rec, "type")));
    json_t *scope = tmpl_scope(NULL, NULL, rec);
    adapter_target_t t;
    adapter_call_t call;
    adapter_result_t res;

    FUZZ_CHECK(json_object_get(json_object_get(scope, "channel"), "info") == NULL,
               "tmpl_scope kept info");
    json_decref(scope);
    check_keys(json_string_value(json_object_get(rec, "_id")), "M1");
    if (ops == NULL)
        return;
    memset(&t, 0, sizeof(t));
    t.base_url = "https://platform.example/api";
    t.info = json_object_get(rec, "info");
    t.to = "85291234567";
    t.now_ms = FUZZ_NOW;
    memset(&call, 0, sizeof(call));
    adapter_result_init(&res);
    if (ops->cred_needs_refresh != NULL)
        (void)ops->cred_needs_refresh(t.info, FUZZ_NOW);
    if (ops->build_cred != NULL)
        check_call(ops->build_cred(&t, &call, &res), &call, &res, "build_cred");
    if (ops->build_check != NULL)
        check_call(ops->build_check(&t, &call, &res), &call, &res, "build_check");
    if (ops->build_upload != NULL)
        check_call(ops->build_upload(&t, "\x89PNG\r\n\x1a\n", 8,
                                     json_string_value(json_object_get(t.info, "contentType")),
                                     &call, &res),
                   &call, &res, "build_upload");
    for (size_t i = 0; i < sizeof(responses) / sizeof(responses[0]); i++) {
        json_t *resp = json_loads(responses[i], 0, NULL);
        check_call(ops->build_send(&t, resp, "media-1", &call, &res), &call, &res, "build_send");
        json_decref(resp);
    }
}

static void check_member_record(const json_t *rec)
{
    json_t *m, *addr;
    bg_error_t err;
    const char *ext = json_string_value(json_object_get(rec, "externalId"));

    if (!json_is_object(rec))
        return;
    check_keys(json_string_value(json_object_get(rec, "channel")),
               json_string_value(json_object_get(rec, "_id")));
    if (ext != NULL) {
        addr = result_address(ext);
        FUZZ_CHECK(json_is_string(addr) || json_is_integer(addr), "result_address");
        json_decref(addr);
    }
    /* The write-back's compare-and-set on whatever record is stored: this delta fits any. */
    m = json_deep_copy(rec);
    memset(&err, 0, sizeof(err));
    FUZZ_CHECK(member_apply_delta(m, fixed_delta, FUZZ_NOW, &err) == 0,
               "the fixed delta refused on a record: %s", err.msg);
    FUZZ_CHECK(json_integer_value(
                   json_object_get(json_object_get(json_object_get(m, "meta"), "a"), "b")) == 1,
               "meta.a.b not set");
    FUZZ_CHECK(json_is_false(json_object_get(json_object_get(m, "botMeta"), "subscribed")),
               "subscribed not set");
    FUZZ_CHECK(json_integer_value(json_object_get(m, "updatedAt")) == FUZZ_NOW, "updatedAt");
    fuzz_json_roundtrip(m, "mutated member");
    json_decref(m);
}

/* The input as a delta on a valid member: all or nothing, and the same as its ops one by one. */
static void check_delta(const json_t *delta)
{
    json_t *m = json_deep_copy(default_member), *stepwise = json_deep_copy(default_member);
    json_t *none = json_array(), *op;
    bg_error_t err;
    int rc, failed = 0;
    size_t i;

    memset(&err, 0, sizeof(err));
    rc = member_apply_delta(m, delta, FUZZ_NOW, &err);
    if (rc < 0) {
        fuzz_check_error(&err, "member_apply_delta");
        FUZZ_CHECK(json_equal(m, default_member), "a refused delta changed the member");
    } else {
        FUZZ_CHECK(rc == 0 && json_is_object(m), "member_apply_delta rc %d", rc);
        FUZZ_CHECK(json_is_array(json_object_get(m, "tags")) &&
                       json_is_object(json_object_get(m, "meta")) &&
                       json_is_object(json_object_get(json_object_get(m, "botMeta"), "tempData")),
                   "applied member lacks a part");
        fuzz_json_roundtrip(m, "applied member");
    }
    json_array_foreach(delta, i, op) {
        json_t *before = json_deep_copy(stepwise);
        const char *path = json_string_value(json_object_get(op, "path"));
        if (path != NULL && member_path_allowed(path))
            FUZZ_CHECK(member_path_prefix_allowed(path), "allowed path fails the import check");
        if (member_apply_op(stepwise, op, &err) < 0) {
            fuzz_check_error(&err, "member_apply_op");
            FUZZ_CHECK(json_equal(stepwise, before), "a refused op changed the member");
            failed = 1;
        }
        json_decref(before);
        if (failed)
            break;
    }
    if (json_is_array(delta)) {
        FUZZ_CHECK(failed == (rc < 0), "delta %s, its ops one by one %s", rc < 0 ? "refused" : "ok",
                   failed ? "refused" : "ok");
        if (!failed) {
            FUZZ_CHECK(member_apply_delta(stepwise, none, FUZZ_NOW, &err) == 0, "empty delta");
            FUZZ_CHECK(json_equal(stepwise, m), "the ops one by one give another member");
        }
    }
    json_decref(m);
    json_decref(stepwise);
    json_decref(none);
}

/* 1 when the tree is valid. */
static int check_tree(const json_t *rec)
{
    bg_error_t err;
    json_t *meta;

    memset(&err, 0, sizeof(err));
    if (tree_validate(rec, &script_nodecode, &err) < 0) {
        fuzz_check_error(&err, "tree_validate");
        FUZZ_CHECK(err.code == BG_ERR_MISSING_PARAM || err.code == BG_ERR_UNSUPPORTED ||
                       err.code == BG_ERR_LIMIT,
                   "tree_validate err_code %d", err.code);
        return 0;
    }
    meta = tree_meta_json(rec);
    FUZZ_CHECK(json_is_string(json_object_get(meta, "app")) &&
                   json_is_string(json_object_get(meta, "name")),
               "tree meta");
    json_decref(meta);
    return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    json_object_seed(1);
    default_tree = json_loads(default_tree_text, 0, NULL);
    fixed_delta = json_loads(fixed_delta_text, 0, NULL);
    default_member = member_new("M1", "C1", "A1", "85291234567", "whatsapp", FUZZ_NOW - 1000);
    json_object_set_new(default_member, "firstName", json_string("Ann"));
    json_object_set_new(default_member, "customLocale", json_string("zh-HK"));
    json_object_set_new(default_member, "tags", json_pack("[s]", "vip"));
    json_object_set_new(default_member, "meta", json_pack("{s:s,s:s}", "k", "key", "next", "N9"));
    default_channel = json_pack("{s:s,s:s,s:s,s:b,s:{s:s}}", "_id", "C1", "app", "A1", "type",
                                "whatsapp", "on", 1, "info", "adminAuthToken", "secret");
    default_meta = json_pack("{s:s,s:[i,i]}", "orderId", "O-1", "list", 1, 2);
    if (default_tree == NULL || fixed_delta == NULL || default_member == NULL ||
        default_channel == NULL || default_meta == NULL)
        abort();
    return 0;
}

/* jscan_scalars, as the brief member decoding reads lastInboundAt: it accepts exactly what
 * jscan_strings accepts; a number jansson reads comes back as text strtod reads whole, a string
 * as jansson's; and the window's reader of the field takes whatever the record holds. */
static void check_scalars(const uint8_t *data, size_t size, const json_t *rec, int strings_ok)
{
    static const char *const keys[] = {"_id", "lastInboundAt"};
    char *out[2], *end;
    int ok = jscan_scalars((const char *)data, size, keys, 2, out, 1u << 1) == 0;
    const json_t *v = json_object_get(rec, "lastInboundAt");

    FUZZ_CHECK(ok == strings_ok, "jscan_scalars and jscan_strings disagree");
    (void)window_last_inbound(rec);
    if (!ok)
        return;
    if (out[1] != NULL && json_is_number(v)) {
        (void)strtod(out[1], &end);
        FUZZ_CHECK(*end == '\0', "jscan_scalars number text %s", out[1]);
    }
    if (json_is_object(rec) && count_braces((const char *)data, size) < 60 &&
        memmem(data, size, "\\u", 2) == NULL && memchr(data, 0, size) == NULL)
        FUZZ_CHECK((out[1] != NULL) == (json_is_number(v) || json_is_string(v)),
                   "jscan_scalars lastInboundAt presence");
    free(out[0]);
    free(out[1]);
}

/* The brief member decoding (jscan) against jansson on the same text: whenever both accept
 * it, the strings agree; an object jansson accepts (not too deep) jscan accepts too. */
static void check_jscan(const uint8_t *data, size_t size, const json_t *rec)
{
    static const char *const keys[] = {"_id", "externalId", "text"};
    char *out[3];
    int ok = jscan_strings((const char *)data, size, keys, 3, out) == 0;

    if (ok)
        for (int i = 0; i < 3; i++)
            FUZZ_CHECK(out[i] == NULL || fuzz_utf8_valid(out[i], strlen(out[i])), "jscan %s",
                       keys[i]);
    /* keys are matched on their raw bytes (botgate's records never escape keys): compare only
     * texts without \u escapes, where jansson's keys are the raw ones too */
    if (json_is_object(rec) && count_braces((const char *)data, size) < 60 &&
        memmem(data, size, "\\u", 2) == NULL && memchr(data, 0, size) == NULL) {
        FUZZ_CHECK(ok, "jscan refused an object jansson accepts");
        for (int i = 0; i < 3; i++) {
            const char *want = json_string_value(json_object_get(rec, keys[i]));
            FUZZ_CHECK((want == NULL) == (out[i] == NULL), "jscan %s presence", keys[i]);
            FUZZ_CHECK(want == NULL || strcmp(want, out[i]) == 0, "jscan %s value", keys[i]);
        }
    }
    if (ok)
        for (int i = 0; i < 3; i++)
            free(out[i]);
    check_scalars(data, size, rec, ok);
}

/* The JSON writer: any value written as a string and as a value reads back the same. */
static void check_jsonw(const json_t *rec)
{
    const char *key;
    json_t *value;
    jsonw_t w;
    char *text;
    json_t *back;

    if (!json_is_object(rec))
        return;
    jw_init(&w);
    jw_lit(&w, "{");
    int first = 1;
    json_object_foreach((json_t *)rec, key, value) {
        if (!first)
            jw_lit(&w, ",");
        first = 0;
        jw_str(&w, key);
        jw_lit(&w, ":");
        if (json_is_string(value))
            jw_str(&w, json_string_value(value));
        else
            jw_json(&w, value);
    }
    jw_lit(&w, "}");
    text = jw_steal(&w, NULL);
    FUZZ_CHECK(text != NULL, "jsonw failed");
    back = json_loads(text, 0, NULL);
    FUZZ_CHECK(back != NULL && json_equal(back, rec), "jsonw text: %s", text);
    json_decref(back);
    free(text);
    /* jw_dump writes exactly what jansson writes */
    {
        char *mine = jw_dump(rec, NULL), *theirs = json_dumps(rec, JSON_COMPACT);
        FUZZ_CHECK(mine != NULL && theirs != NULL && strcmp(mine, theirs) == 0,
                   "jw_dump %s\n  json_dumps %s", mine ? mine : "(null)",
                   theirs ? theirs : "(null)");
        free(mine);
        free(theirs);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *rec = json_loadb((const char *)data, size, 0, NULL); /* as store.c reads a reply */
    const json_t *nodes = json_object_get(rec, "nodes");
    size_t bound = NODE_CHAIN_MAX * (count_braces((const char *)data, size) + 2);
    source_t src;
    int valid;

    check_jscan(data, size, rec);
    if (rec == NULL)
        return 0;
    check_jsonw(rec);
    check_token(rec);
    check_channel(rec);
    check_member_record(rec);
    check_delta(rec);
    valid = check_tree(rec);

    /* The input as the node of every fetch. */
    memset(&src, 0, sizeof(src));
    src.node = rec;
    src.bound = bound;
    drive(&src, default_member, LONG_TREE, LONG_NODE);

    /* The input as the tree the nodes come from, starting at its first node. */
    if (json_is_object(nodes) && json_object_size(nodes) > 0) {
        const char *tree = json_string_value(json_object_get(rec, "_id"));
        void *it = json_object_iter((json_t *)nodes);
        memset(&src, 0, sizeof(src));
        src.tree = rec;
        src.bound = bound;
        src.valid = valid;
        drive(&src, default_member, tree ? tree : "T1", json_object_iter_key(it));
    }

    /* The input as the member a run works on. */
    if (json_is_object(rec)) {
        memset(&src, 0, sizeof(src));
        src.tree = default_tree;
        src.bound =
            NODE_CHAIN_MAX * (count_braces(default_tree_text, sizeof(default_tree_text)) + 2);
        drive(&src, rec, "T1", "N1");
    }
    json_decref(rec);
    return 0;
}
