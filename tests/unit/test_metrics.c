/* test_metrics.c - the err_code label of each counted request in the exposition. metrics.c
 * is compiled into this test (the gateway has no library of its own); it needs only an
 * evbuffer. */
#include "../../gateway/metrics.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

static char *render(const metrics_t *m)
{
    const metrics_t *all[1] = {m};
    struct evbuffer *b = evbuffer_new();
    size_t n;
    char *text;

    metrics_render(b, all, 1);
    n = evbuffer_get_length(b);
    text = malloc(n + 1);
    assert_non_null(text);
    evbuffer_remove(b, text, n);
    text[n] = '\0';
    evbuffer_free(b);
    return text;
}

/* Every err_code the contract has is its own series: 121 (shutting down, out of memory) was
 * counted as "internal". */
static void test_each_code_has_its_label(void **state)
{
    static metrics_t m;
    static const int codes[] = {100, 104, 108, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121};
    char *text;
    char want[160];

    (void)state;
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        metrics_request(&m, METRICS_ROUTE_SEND, 500, codes[i], 1000);
    metrics_request(&m, METRICS_ROUTE_REDIRECT, 500, -1, 1000);
    text = render(&m);
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        snprintf(
            want, sizeof(want),
            "botgate_requests_total{route=\"sendResponses\",status=\"500\",err_code=\"%d\"} 1\n",
            codes[i]);
        if (strstr(text, want) == NULL)
            fail_msg("missing: %s", want);
    }
    assert_non_null(strstr(text, "botgate_requests_total{route=\"redirectMemberToNode\","
                                 "status=\"500\",err_code=\"unauthorized\"} 1\n"));
    assert_null(strstr(text, "err_code=\"internal\""));
    free(text);
}

/* The histogram lines: each bucket with its bound (and the route label where there is one),
 * the +Inf bucket, sum and count; the same layout for an unlabelled histogram. */
static void test_histogram_lines(void **state)
{
    static metrics_t m;
    static const char *const want[] = {
        "botgate_request_duration_seconds_bucket{route=\"sendResponses\",le=\"0.0005\"} 0\n",
        "botgate_request_duration_seconds_bucket{route=\"sendResponses\",le=\"2.5\"} 2\n",
        "botgate_request_duration_seconds_bucket{route=\"sendResponses\",le=\"10\"} 2\n",
        "botgate_request_duration_seconds_bucket{route=\"sendResponses\",le=\"+Inf\"} 3\n",
        "botgate_request_duration_seconds_sum{route=\"sendResponses\"} 20.003000\n",
        "botgate_request_duration_seconds_count{route=\"sendResponses\"} 3\n",
        "botgate_redis_command_duration_seconds_bucket{le=\"0.0005\"} 0\n",
        "botgate_redis_command_duration_seconds_bucket{le=\"+Inf\"} 1\n",
        "botgate_redis_command_duration_seconds_sum 0.002000\n"
        "botgate_redis_command_duration_seconds_count 1\n",
    };
    char *text;

    (void)state;
    metrics_request(&m, METRICS_ROUTE_SEND, 200, 0, 1000);
    metrics_request(&m, METRICS_ROUTE_SEND, 200, 0, 2000);
    metrics_request(&m, METRICS_ROUTE_SEND, 200, 0, 20000000);
    metrics_observe(&m.redis_latency, 2000);
    text = render(&m);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (strstr(text, want[i]) == NULL)
            fail_msg("missing: %s", want[i]);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_code_has_its_label),
        cmocka_unit_test(test_histogram_lines),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
