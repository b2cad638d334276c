/* fuzz_script.c - libFuzzer target for node code (script/): any text as a Lua script,
 * run in the sandbox with small caps; every http.request it makes is answered (a JSON body,
 * then a failure, in turn) until it ends. Checks: no crash or leak (ASan), every failure is a
 * 126 with a valid UTF-8 message, a finished run's member ops apply, and the secret in
 * channel.info never appears in a result or an http.request (unless the code spells it). */
#include "fuzz_util.h"

#include "core/member.h"
#include "script/script.h"

#define SECRET "Zq9ChannelInfoSecretMarker"

static json_t *member, *channel, *meta;
static int code_has_secret; /* the code itself spells the marker: nothing to check */

static void contains_no_secret(const json_t *v)
{
    char *text;

    if (code_has_secret)
        return;
    text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

    FUZZ_CHECK(text == NULL || strstr(text, SECRET) == NULL, "channel.info leaked: %.200s", text);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    script_limits_t lim = {20000, 256, 0, NULL};
    script_t *s;
    script_run_t *run;
    script_status_t st;
    bg_error_t err;
    int turns = 0;

    if (member == NULL) {
        member = json_loads("{\"_id\":\"M1\",\"firstName\":\"Ann\",\"meta\":{\"a\":[1,{}]},"
                            "\"botMeta\":{\"subscribed\":true,\"tempData\":{}},\"tags\":[]}",
                            0, NULL);
        channel = json_loads("{\"_id\":\"C1\",\"info\":{\"token\":\"" SECRET "\"}}", 0, NULL);
        meta = json_loads("{\"status\":\"shipped\",\"n\":[1,2,3]}", 0, NULL);
    }
    code_has_secret = memmem(data, size, "Zq9", 3) != NULL;
    s = script_compile((const char *)data, size, "fuzz", &err);
    if (s == NULL) {
        FUZZ_CHECK(err.code == BG_ERR_SCRIPT, "compile error code %d", err.code);
        FUZZ_CHECK(fuzz_utf8_valid(err.msg, strlen(err.msg)), "message not UTF-8");
        return 0;
    }
    run = script_run_new(s, lim, member, channel, meta);
    script_free(s);
    if (run == NULL)
        return 0;
    while ((st = script_run_resume(run, &err)) == SCRIPT_NEED_HTTP) {
        contains_no_secret(script_run_http(run));
        if (turns++ % 2 == 0)
            script_run_http_done(run, 200, "{\"v\":[1,\"x\"]}", 13, "application/json", NULL);
        else
            script_run_http_done(run, 0, NULL, 0, NULL, "timed out");
    }
    if (st == SCRIPT_FAILED) {
        FUZZ_CHECK(err.code == BG_ERR_SCRIPT, "failure code %d", err.code);
        FUZZ_CHECK(fuzz_utf8_valid(err.msg, strlen(err.msg)), "message not UTF-8");
        FUZZ_CHECK(script_run_member_ops(run) == NULL, "a failed run has ops");
    } else {
        json_t *copy = json_deep_copy(member), *result = script_run_result(run);
        bg_error_t e;

        FUZZ_CHECK(member_apply_delta(copy, script_run_member_ops(run), FUZZ_NOW, &e) == 0,
                   "ops do not apply: %s", e.msg);
        contains_no_secret(result);
        json_decref(result);
        json_decref(copy);
    }
    script_run_free(run);
    return 0;
}
