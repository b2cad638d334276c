/* test_request.c - request bodies of both operations: fields, types, ids, 108/117 (the body's
 * size, depth, strings and JSON: test_request_body.c). */
#include "request_test.h"

static void test_send_minimal(void **state)
{
    send_request_t req;

    (void)state;
    send_ok("{" TARGET ",\"response\":[" TEXT_RESP "]}", &req);
    assert_string_equal(req.target.channel_id, "C1");
    assert_string_equal(req.target.member_id, "M1");
    assert_null(req.target.recipient_id);
    assert_int_equal(json_array_size(req.responses), 1);
    assert_ptr_equal(req.responses, json_object_get(req.root, "response"));
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(req.responses, 0), "text")), "hi");
    request_send_free(&req);
    assert_null(req.root);
    assert_null(req.responses);
    assert_null(req.target.channel_id);
}

static void test_send_member_and_recipient(void **state)
{
    send_request_t req;

    (void)state;
    /* recipientId alone */
    send_ok("{\"channelId\":\"C1\",\"recipientId\":\"+852 9123-4567\",\"response\":[" TEXT_RESP
            "]}",
            &req);
    assert_null(req.target.member_id);
    assert_string_equal(req.target.recipient_id, "+852 9123-4567"); /* normalised later */
    request_send_free(&req);

    /* recipientId null is accepted with memberId */
    send_ok("{" TARGET ",\"recipientId\":null,\"response\":[" TEXT_RESP "]}", &req);
    assert_string_equal(req.target.member_id, "M1");
    assert_null(req.target.recipient_id);
    request_send_free(&req);

    /* memberId null with a recipientId */
    send_ok(
        "{\"channelId\":\"C1\",\"memberId\":null,\"recipientId\":\"R9\",\"response\":[" TEXT_RESP
        "]}",
        &req);
    assert_null(req.target.member_id);
    assert_string_equal(req.target.recipient_id, "R9");
    request_send_free(&req);

    /* both: both are kept, the operation lets memberId win */
    send_ok("{" TARGET ",\"recipientId\":\"R9\",\"response\":[" TEXT_RESP "]}", &req);
    assert_string_equal(req.target.member_id, "M1");
    assert_string_equal(req.target.recipient_id, "R9");
    request_send_free(&req);

    /* ids that are not ASCII, or hold ':' '/' and spaces, are fine */
    send_ok("{\"channelId\":\"Ch\xc3\xa9:1/x "
            "y\",\"memberId\":\"\xe2\x82\xac-2\",\"response\":[" TEXT_RESP "]}",
            &req);
    assert_string_equal(req.target.channel_id, "Ch\xc3\xa9:1/x y");
    assert_string_equal(req.target.member_id, "\xe2\x82\xac-2");
    request_send_free(&req);
}

static void test_send_target_errors(void **state)
{
    static const struct {
        const char *body;
        const char *name;
    } cases[] = {
        {"{\"memberId\":\"M1\",\"response\":[" TEXT_RESP "]}", "channelId"},
        {"{\"channelId\":null,\"memberId\":\"M1\",\"response\":[" TEXT_RESP "]}", "channelId"},
        {"{\"channelId\":5,\"memberId\":\"M1\",\"response\":[" TEXT_RESP "]}", "channelId"},
        {"{\"channelId\":\"\",\"memberId\":\"M1\",\"response\":[" TEXT_RESP "]}", "channelId"},
        {"{\"channelId\":{},\"memberId\":\"M1\",\"response\":[" TEXT_RESP "]}", "channelId"},
        {"{\"channelId\":[\"C1\"],\"memberId\":\"M1\",\"response\":[" TEXT_RESP "]}", "channelId"},
        {"{\"channelId\":true,\"memberId\":\"M1\",\"response\":[" TEXT_RESP "]}", "channelId"},
        {"{\"channelId\":\"C1\",\"memberId\":5,\"response\":[" TEXT_RESP "]}", "memberId"},
        {"{\"channelId\":\"C1\",\"memberId\":true,\"response\":[" TEXT_RESP "]}", "memberId"},
        {"{\"channelId\":\"C1\",\"memberId\":\"\",\"recipientId\":\"R1\",\"response\":[" TEXT_RESP
         "]}",
         "memberId"},
        {"{\"channelId\":\"C1\",\"recipientId\":5,\"response\":[" TEXT_RESP "]}", "recipientId"},
        {"{\"channelId\":\"C1\",\"recipientId\":[],\"response\":[" TEXT_RESP "]}", "recipientId"},
        {"{\"channelId\":\"C1\",\"recipientId\":\"\",\"response\":[" TEXT_RESP "]}", "recipientId"},
        {"{" TARGET ",\"recipientId\":12,\"response\":[" TEXT_RESP "]}", "recipientId"},
        /* no member at all */
        {"{\"channelId\":\"C1\",\"response\":[" TEXT_RESP "]}", "memberId"},
        {"{\"channelId\":\"C1\",\"memberId\":null,\"recipientId\":null,\"response\":[" TEXT_RESP
         "]}",
         "recipientId"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        send_fails(cases[i].body, BG_ERR_MISSING_PARAM, cases[i].name);
}

static void test_send_id_characters(void **state)
{
    static const char *const keys[] = {"channelId", "memberId", "recipientId"};
    static const char *const refused[] = {
        "\"a{b\"",
        "\"a}b\"",
        "\"{C1}\"",
        "\"}\"",
        "\"a\\nb\"",
        "\"a\\tb\"",
        "\"a\\rb\"",
        "\"\\u0001\"",
        "\"a\\u001fb\"",
        "\"a\\u007fb\"",
        "\"x\\u001b[0m\"",
        /* C1 controls (NEL among them) and the Unicode line and paragraph separators, escaped
         * and as raw UTF-8 */
        "\"a\\u0080b\"",
        "\"a\\u0085b\"",
        "\"\\u009f\"",
        "\"a\\u2028b\"",
        "\"a\\u2029\"",
        "\"a\xc2\x85\"",
        "\"\xc2\x80\"",
        "\"a\xc2\x9f\"",
        "\"a\xe2\x80\xa8\"",
        "\"\xe2\x80\xa9z\"",
    };
    /* their neighbours are printable: no-break space, U+00A9, U+2027, U+202A, U+20AC */
    static const char *const allowed[] = {
        "\"a b\"",       "\"a:b\"",     "\"~!@#$%^&*()[]\"", "\"\\u00e9\\u20ac\"",
        "\"a\\u00a0b\"", "\"\\u00a9\"", "\"\xe2\x80\xa7\"",  "\"\\u202a\"",
        "\"\xc2\xa0\""};

    (void)state;
    for (size_t k = 0; k < 3; k++) {
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
            char *body = body_with_id(keys[k], refused[i]);
            send_fails(body, BG_ERR_MISSING_PARAM, keys[k]);
            free(body);
        }
        for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
            char *body = body_with_id(keys[k], allowed[i]);
            send_accepts(body);
            free(body);
        }
    }
}

static void test_send_id_lengths(void **state)
{
    static const char *const keys[] = {"channelId", "memberId"};

    (void)state;
    for (size_t k = 0; k < 2; k++) {
        for (int n = REQUEST_MAX_ID - 1; n <= REQUEST_MAX_ID + 2; n++) {
            buf_t v = {0};
            char *body;

            buf_add(&v, "\"");
            buf_rep(&v, "i", (size_t)n);
            buf_add(&v, "\"");
            body = body_with_id(keys[k], v.s);
            if (n <= REQUEST_MAX_ID)
                send_accepts(body);
            else
                send_fails(body, BG_ERR_LIMIT, keys[k]);
            free(body);
            buf_free(&v);
        }
        /* bytes count, not characters: 128 two-byte characters fit, 129 do not */
        for (size_t chars = 128; chars <= 129; chars++) {
            buf_t v = {0};
            char *body;

            buf_add(&v, "\"");
            buf_rep(&v, "\xc3\xa9", chars);
            buf_add(&v, "\"");
            body = body_with_id(keys[k], v.s);
            if (chars == 128)
                send_accepts(body);
            else
                send_fails(body, BG_ERR_LIMIT, keys[k]);
            free(body);
            buf_free(&v);
        }
    }
}

/* A recipientId becomes the member's address: what a platform call cannot carry whole is
 * refused here (108, naming it and the limit), never cut later and sent to another id. */
static void test_send_recipient_length(void **state)
{
    static const size_t refused[] = {REQUEST_MAX_RECIPIENT + 1, 200, 255, 256, 257, 300};

    (void)state;
    assert_int_equal(REQUEST_MAX_RECIPIENT, 191);
    for (size_t n = REQUEST_MAX_RECIPIENT - 1; n <= REQUEST_MAX_RECIPIENT; n++) {
        buf_t v = {0};
        send_request_t req;

        buf_add(&v, "{\"channelId\":\"C1\",\"recipientId\":\"");
        buf_rep(&v, "r", n);
        buf_add(&v, "\",\"response\":[" TEXT_RESP "]}");
        send_ok(v.s, &req);
        assert_int_equal(strlen(req.target.recipient_id), n);
        request_send_free(&req);
        buf_free(&v);
    }
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        buf_t v = {0};
        send_request_t req;
        bg_error_t err;

        buf_add(&v, "{\"channelId\":\"C1\",\"recipientId\":\"");
        buf_rep(&v, "r", refused[i]);
        buf_add(&v, "\",\"response\":[" TEXT_RESP "]}");
        send_fails(v.s, BG_ERR_MISSING_PARAM, "recipientId");
        assert_int_equal(request_parse_send(v.s, v.len, &req, &err), -1);
        assert_non_null(strstr(err.msg, "191 bytes"));
        buf_free(&v);
    }
    /* a two-byte character across the limit: 190 bytes and "\xc3\xa9" make 192 */
    {
        buf_t v = {0};
        char *body;

        buf_add(&v, "\"");
        buf_rep(&v, "r", REQUEST_MAX_RECIPIENT - 1);
        buf_add(&v, "\xc3\xa9\"");
        body = body_with_id("recipientId", v.s);
        send_fails(body, BG_ERR_MISSING_PARAM, "recipientId");
        free(body);
        buf_free(&v);
    }
    /* the same limit on redirectMemberToNode */
    {
        buf_t v = {0};

        buf_add(&v, "{\"channelId\":\"C1\",\"recipientId\":\"");
        buf_rep(&v, "r", REQUEST_MAX_RECIPIENT + 1);
        buf_add(&v, "\"," REDIRECT "}");
        redirect_fails(v.s, BG_ERR_MISSING_PARAM, "recipientId");
        buf_free(&v);
    }
}

static void test_send_response_synonym(void **state)
{
    send_request_t req;

    (void)state;
    send_ok("{" TARGET ",\"responses\":[" TEXT_RESP ",{\"type\":\"TEXT\",\"text\":\"2\"}]}", &req);
    assert_int_equal(json_array_size(req.responses), 2);
    assert_ptr_equal(req.responses, json_object_get(req.root, "responses"));
    request_send_free(&req);

    /* "response" wins when both are there */
    send_ok("{" TARGET ",\"responses\":[" TEXT_RESP "," TEXT_RESP "],\"response\":[" TEXT_RESP "]}",
            &req);
    assert_int_equal(json_array_size(req.responses), 1);
    assert_ptr_equal(req.responses, json_object_get(req.root, "response"));
    request_send_free(&req);

    send_fails("{" TARGET "}", BG_ERR_MISSING_PARAM, "response");
    send_fails("{" TARGET ",\"response\":{}}", BG_ERR_MISSING_PARAM, "response");
    send_fails("{" TARGET ",\"response\":\"hi\"}", BG_ERR_MISSING_PARAM, "response");
    send_fails("{" TARGET ",\"response\":null}", BG_ERR_MISSING_PARAM, "response");
    send_fails("{" TARGET ",\"response\":[]}", BG_ERR_MISSING_PARAM, "response");
    send_fails("{" TARGET ",\"response\":" TEXT_RESP "}", BG_ERR_MISSING_PARAM, "response");
    send_fails("{" TARGET ",\"responses\":{}}", BG_ERR_MISSING_PARAM, "responses");
    send_fails("{" TARGET ",\"responses\":[]}", BG_ERR_MISSING_PARAM, "responses");
    send_fails("{" TARGET ",\"Response\":[" TEXT_RESP "]}", BG_ERR_MISSING_PARAM, "response");
}

static void test_send_shapes(void **state)
{
    send_request_t req;
    const json_t *r;

    (void)state;
    send_ok("{" TARGET ",\"response\":["
            "{\"type\":\"TEXT\",\"text\":\"Hello \\u00e9\"},"
            "{\"type\":\"IMAGE\",\"url\":\"https://cdn.example.com/a.png\"},"
            "{\"type\":\"IMAGE\",\"url\":\"http://cdn.example.com/b.jpg\"},"
            "{\"type\":\"TEMPLATE\",\"elementName\":\"order_update\",\"languageCode\":\"en\","
            "\"components\":[{\"type\":\"header\",\"parameters\":[{\"type\":\"video\","
            "\"video\":{\"id\":\"vid-1\"}}]},{\"type\":\"button\",\"sub_type\":\"quick_reply\","
            "\"index\":\"0\",\"parameters\":[{\"type\":\"payload\",\"payload\":\"yes\"}]}]},"
            "{\"type\":\"TEMPLATE\",\"elementName\":\"hello\",\"languageCode\":\"zh_HK\"},"
            "{\"type\":\"TEMPLATE\",\"elementName\":\"e\",\"languageCode\":\"en\","
            "\"components\":[]}"
            "]}",
            &req);
    assert_int_equal(json_array_size(req.responses), 6);
    r = json_array_get(req.responses, 0);
    assert_string_equal(json_string_value(json_object_get(r, "text")), "Hello \xc3\xa9");
    r = json_array_get(req.responses, 1);
    assert_string_equal(json_string_value(json_object_get(r, "url")),
                        "https://cdn.example.com/a.png");
    r = json_array_get(req.responses, 3);
    assert_string_equal(json_string_value(json_object_get(r, "type")), "TEMPLATE");
    assert_int_equal(json_array_size(json_object_get(r, "components")), 2);
    request_send_free(&req);
}

static void test_send_shape_errors(void **state)
{
    static const struct {
        const char *resp;
        const char *name;
    } cases[] = {
        {"{\"type\":\"IMAGE\"}", "response[2].url"},
        {"{\"type\":\"IMAGE\",\"url\":5}", "response[2].url"},
        {"{\"type\":\"IMAGE\",\"url\":\"\"}", "response[2].url"},
        {"{\"type\":\"IMAGE\",\"url\":null}", "response[2].url"},
        {"{\"type\":\"IMAGE\",\"url\":\"ftp://x/a.png\"}", "response[2].url"},
        {"{\"type\":\"IMAGE\",\"url\":\"file:///etc/passwd\"}", "response[2].url"},
        {"{\"type\":\"IMAGE\",\"url\":\"cdn.example.com/a.png\"}", "response[2].url"},
        {"{\"type\":\"IMAGE\",\"url\":\"https:/\"}", "response[2].url"},
        {"{\"type\":\"TEXT\"}", "response[2].text"},
        {"{\"type\":\"TEXT\",\"text\":7}", "response[2].text"},
        {"{\"type\":\"TEXT\",\"text\":\"\"}", "response[2].text"},
        {"{\"type\":\"TEXT\",\"text\":[\"a\"]}", "response[2].text"},
        {"{\"text\":\"hi\"}", "response[2].type"},
        {"{\"type\":5,\"text\":\"hi\"}", "response[2].type"},
        {"{\"type\":\"\",\"text\":\"hi\"}", "response[2].type"},
        {"{\"type\":null,\"text\":\"hi\"}", "response[2].type"},
        {"\"hi\"", "response[2]"},
        {"[]", "response[2]"},
        {"null", "response[2]"},
        {"42", "response[2]"},
        {"{\"type\":\"TEMPLATE\",\"languageCode\":\"en\"}", "response[2].elementName"},
        {"{\"type\":\"TEMPLATE\",\"elementName\":3,\"languageCode\":\"en\"}",
         "response[2].elementName"},
        {"{\"type\":\"TEMPLATE\",\"elementName\":\"e\"}", "response[2].languageCode"},
        {"{\"type\":\"TEMPLATE\",\"elementName\":\"e\",\"languageCode\":\"\"}",
         "response[2].languageCode"},
        {"{\"type\":\"TEMPLATE\",\"elementName\":\"e\",\"languageCode\":\"en\",\"components\":{}}",
         "response[2].components"},
        {"{\"type\":\"TEMPLATE\",\"elementName\":\"e\",\"languageCode\":\"en\","
         "\"components\":\"x\"}",
         "response[2].components"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        buf_t b = {0};
        char syn[64];

        buf_add(&b, "{" TARGET ",\"response\":[" TEXT_RESP "," TEXT_RESP ",%s," TEXT_RESP "]}",
                cases[i].resp);
        send_fails(b.s, BG_ERR_MISSING_PARAM, cases[i].name);
        buf_free(&b);

        /* the synonym is named as the caller spelled it */
        buf_add(&b, "{" TARGET ",\"responses\":[" TEXT_RESP "," TEXT_RESP ",%s]}", cases[i].resp);
        snprintf(syn, sizeof(syn), "responses%s", cases[i].name + strlen("response"));
        send_fails(b.s, BG_ERR_MISSING_PARAM, syn);
        buf_free(&b);
    }
}

static void test_send_unknown_type(void **state)
{
    buf_t b = {0};
    bg_error_t err;
    send_request_t req;

    (void)state;
    send_fails("{" TARGET ",\"response\":[{\"type\":\"GIF\",\"url\":\"https://x/v.gif\"}]}",
               BG_ERR_UNSUPPORTED, "GIF");
    send_fails("{" TARGET ",\"response\":[{\"type\":\"text\",\"text\":\"hi\"}]}",
               BG_ERR_UNSUPPORTED, "text");
    send_fails("{" TARGET ",\"response\":[" TEXT_RESP ",{\"type\":\"SLIDES\"}]}",
               BG_ERR_UNSUPPORTED, "SLIDES");
    /* checked in order: the unknown type comes before the broken IMAGE */
    send_fails("{" TARGET ",\"response\":[{\"type\":\"POLL\"},{\"type\":\"IMAGE\"}]}",
               BG_ERR_UNSUPPORTED, "POLL");
    send_fails("{" TARGET ",\"response\":[{\"type\":\"IMAGE\"},{\"type\":\"POLL\"}]}",
               BG_ERR_MISSING_PARAM, "response[0].url");

    /* a long type of multi-byte characters is cut in the message at a character boundary:
     * the message must stay valid UTF-8 at every cut position */
    for (size_t lead = 0; lead < 4; lead++) {
        static const char *const chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
        for (size_t c = 0; c < 3; c++) {
            json_t *j;

            b.len = 0;
            buf_add(&b, "{" TARGET ",\"response\":[{\"type\":\"");
            buf_rep(&b, "X", lead);
            buf_rep(&b, chars[c], 40);
            buf_add(&b, "\"}]}");
            bg_error_clear(&err);
            assert_int_equal(request_parse_send(b.s, b.len, &req, &err), -1);
            assert_int_equal(err.code, BG_ERR_UNSUPPORTED);
            j = json_string(err.msg);
            if (j == NULL)
                fail_msg("message is not valid UTF-8 (lead %zu, char %zu)", lead, c);
            json_decref(j);
            j = bg_error_to_json(&err);
            assert_string_equal(json_string_value(json_object_get(j, "err")), err.msg);
            json_decref(j);
        }
    }
    buf_free(&b);
}

/* One response, alone in a request: accepted, or refused with code naming name. */
static void one_response(const char *resp, int code, const char *name)
{
    buf_t b = {0};

    buf_add(&b, "{" TARGET ",\"response\":[%s]}", resp);
    if (code == 0)
        send_accepts(b.s);
    else
        send_fails(b.s, code, name);
    buf_free(&b);
}

/* n copies of item, comma-separated, %zu in item replaced by the index. */
static char *items(const char *item, size_t n)
{
    buf_t b = {0};

    buf_add(&b, "%s", "");
    for (size_t i = 0; i < n; i++) {
        buf_add(&b, i ? "," : "");
        buf_add(&b, item, i);
    }
    return b.s;
}

/* Every type of contract.md section 11: its members, nothing else, every limit at the limit
 * and one over; a fallback, and no fallback in it. */
static void test_response_types(void **state)
{
    static const struct {
        const char *resp;
        int code;
        const char *name;
    } cases[] = {
        /* no silent loss: a member the type does not have is named */
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"quickreplies\":[]}", 108, "response[0].quickreplies"},
        {"{\"type\":\"IMAGE\",\"url\":\"https://x/a.png\",\"filename\":\"a\"}", 108,
         "response[0].filename"},
        {"{\"type\":\"AUDIO\",\"url\":\"https://x/a.mp3\",\"caption\":\"a\"}", 108,
         "response[0].caption"},
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"quickReplies\":[{\"title\":\"t\",\"payload\":\"p\","
         "\"image_url\":\"https://x\"}]}",
         108, "response[0].quickReplies[0].image_url"},
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"quickReplies\":[{\"title\":\"t\"}]}", 108,
         "response[0].quickReplies[0].payload"},
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"quickReplies\":[]}", 108, "response[0].quickReplies"},
        /* titles count characters: 20 accented ones fit, 21 do not */
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"quickReplies\":[{\"title\":"
         "\"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"
         "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\","
         "\"payload\":\"p\"}]}",
         0, NULL},
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"quickReplies\":[{\"title\":"
         "\"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"
         "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\","
         "\"payload\":\"p\"}]}",
         118, "response[0].quickReplies[0].title"},
        {"{\"type\":\"VIDEO\",\"url\":\"https://x/a.mp4\",\"caption\":\"c\"}", 0, NULL},
        {"{\"type\":\"FILE\",\"url\":\"ftp://x/a.pdf\"}", 108, "response[0].url"},
        {"{\"type\":\"FILE\",\"url\":\"https://x/a.pdf\",\"caption\":\"c\",\"filename\":\"a.pdf\"}",
         0, NULL},
        {"{\"type\":\"STICKER\",\"sticker\":\"like_heart\"}", 0, NULL},
        {"{\"type\":\"STICKER\",\"url\":\"https://x/s.webp\",\"sticker\":\"like_heart\"}", 108,
         "response[0]"},
        {"{\"type\":\"STICKER\"}", 108, "response[0]"},
        {"{\"type\":\"LOCATION\",\"latitude\":22.3,\"longitude\":114.2,\"name\":\"n\"}", 0, NULL},
        {"{\"type\":\"LOCATION\",\"latitude\":90.5,\"longitude\":114.2}", 108,
         "response[0].latitude"},
        {"{\"type\":\"LOCATION\",\"latitude\":\"22\",\"longitude\":114.2}", 108,
         "response[0].latitude"},
        {"{\"type\":\"LOCATION\",\"latitude\":1}", 108, "response[0].longitude"},
        {"{\"type\":\"BUTTON\",\"text\":\"t\",\"buttons\":[{\"type\":\"postback\",\"title\":\"a\","
         "\"payload\":\"A\"},{\"type\":\"url\",\"title\":\"b\",\"url\":\"https://x\"},"
         "{\"type\":\"phone\",\"title\":\"c\",\"phone\":\"+852 9123 4567\"}]}",
         0, NULL},
        {"{\"type\":\"BUTTON\",\"text\":\"t\",\"buttons\":[]}", 108, "response[0].buttons"},
        {"{\"type\":\"BUTTON\",\"text\":\"t\",\"buttons\":[{\"type\":\"url\",\"title\":\"b\","
         "\"payload\":\"x\",\"url\":\"https://x\"}]}",
         108, "response[0].buttons[0].payload"},
        {"{\"type\":\"BUTTON\",\"text\":\"t\",\"buttons\":[{\"type\":\"phone\",\"title\":\"b\","
         "\"phone\":\"852\"}]}",
         108, "response[0].buttons[0].phone"},
        {"{\"type\":\"BUTTON\",\"text\":\"t\",\"buttons\":[{\"type\":\"call\",\"title\":\"b\"}]}",
         108, "response[0].buttons[0].type"},
        {"{\"type\":\"CAROUSEL\",\"cards\":[{\"title\":\"a\",\"subtitle\":\"s\",\"imageUrl\":"
         "\"https://x/"
         "i.png\",\"buttons\":[{\"type\":\"postback\",\"title\":\"a\",\"payload\":\"A\"}]}]}",
         0, NULL},
        {"{\"type\":\"CAROUSEL\",\"cards\":[{\"subtitle\":\"s\"}]}", 108,
         "response[0].cards[0].title"},
        {"{\"type\":\"LIST\",\"text\":\"t\",\"button\":\"Options\",\"sections\":[{\"rows\":[{"
         "\"id\":\"1\","
         "\"title\":\"r\",\"description\":\"d\"}]}]}",
         0, NULL},
        /* several sections are told apart by their titles */
        {"{\"type\":\"LIST\",\"text\":\"t\",\"button\":\"Options\",\"sections\":[{\"title\":\"a\","
         "\"rows\":[{\"id\":\"1\",\"title\":\"r\"}]},{\"rows\":[{\"id\":\"2\",\"title\":\"r\"}]}]}",
         108, "response[0].sections[1].title"},
        {"{\"type\":\"LIST\",\"text\":\"t\",\"button\":\"123456789012345678901\",\"sections\":[{"
         "\"rows\":"
         "[{\"id\":\"1\",\"title\":\"r\"}]}]}",
         118, "response[0].button"},
        {"{\"type\":\"NATIVE\",\"message\":{\"text\":\"hi\"}}", 0, NULL},
        {"{\"type\":\"NATIVE\",\"message\":{}}", 108, "response[0].message"},
        {"{\"type\":\"NATIVE\"}", 108, "response[0].message"},
        {"{\"type\":\"NATIVE\",\"message\":{\"text\":\"hi\",\"recipient\":{\"id\":\"1\"}}}", 108,
         "response[0].message.recipient"},
        {"{\"type\":\"NATIVE\",\"message\":{\"to\":\"1\"}}", 108, "response[0].message.to"},
        {"{\"type\":\"NATIVE\",\"message\":{\"touser\":\"1\"}}", 108, "response[0].message.touser"},
        {"{\"type\":\"NATIVE\",\"message\":{\"channel\":\"C\"}}", 108,
         "response[0].message.channel"},
        {"{\"type\":\"NATIVE\",\"message\":{\"users\":[]}}", 108, "response[0].message.users"},
        {"{\"type\":\"NATIVE\",\"message\":{\"messaging_product\":\"whatsapp\"}}", 108,
         "response[0].message.messaging_product"},
        /* a fallback is a response, checked as one, without a fallback of its own */
        {"{\"type\":\"LOCATION\",\"latitude\":1,\"longitude\":2,\"fallback\":{\"type\":\"TEXT\","
         "\"text\":\"at 1,2\"}}",
         0, NULL},
        {"{\"type\":\"LOCATION\",\"latitude\":1,\"longitude\":2,\"fallback\":{\"type\":\"TEXT\"}}",
         108, "response[0].fallback.text"},
        {"{\"type\":\"LOCATION\",\"latitude\":1,\"longitude\":2,\"fallback\":{\"type\":\"TEXT\","
         "\"text\":\"a\",\"fallback\":{\"type\":\"TEXT\",\"text\":\"b\"}}}",
         108, "response[0].fallback.fallback"},
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"fallback\":\"b\"}", 108, "response[0].fallback"},
        /* a messageTag (section 14) on any type, its fallback's too; only the four tags */
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"messageTag\":\"HUMAN_AGENT\"}", 0, NULL},
        {"{\"type\":\"CAROUSEL\",\"cards\":[{\"title\":\"c\"}],\"messageTag\":"
         "\"POST_PURCHASE_UPDATE\",\"fallback\":{\"type\":\"TEXT\",\"text\":\"b\","
         "\"messageTag\":\"ACCOUNT_UPDATE\"}}",
         0, NULL},
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"messageTag\":\"PROMOTION\"}", 108,
         "response[0].messageTag must be ACCOUNT_UPDATE"},
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"messageTag\":7}", 108,
         "response[0].messageTag must be a string"},
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"messageTag\":\"\"}", 108, "response[0].messageTag"},
    };
    char *list;
    buf_t b = {0};

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        one_response(cases[i].resp, cases[i].code, cases[i].name);

    /* counts: at the limit, one over */
    static const struct {
        const char *head, *item, *tail, *name;
        size_t max;
    } counts[] = {
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"quickReplies\":[",
         "{\"title\":\"t%zu\",\"payload\":\"p\"}", "]}", "response[0].quickReplies",
         REQUEST_MAX_QUICK_REPLIES},
        {"{\"type\":\"BUTTON\",\"text\":\"a\",\"buttons\":[",
         "{\"type\":\"postback\",\"title\":\"t%zu\",\"payload\":\"p\"}", "]}",
         "response[0].buttons", REQUEST_MAX_BUTTONS},
        {"{\"type\":\"CAROUSEL\",\"cards\":[", "{\"title\":\"c%zu\"}", "]}", "response[0].cards",
         REQUEST_MAX_CARDS},
        {"{\"type\":\"LIST\",\"text\":\"t\",\"button\":\"b\",\"sections\":[",
         "{\"title\":\"s%zu\",\"rows\":[{\"id\":\"1\",\"title\":\"r\"}]}", "]}",
         "response[0].sections", REQUEST_MAX_SECTIONS},
        {"{\"type\":\"LIST\",\"text\":\"t\",\"button\":\"b\",\"sections\":[{\"rows\":[",
         "{\"id\":\"%zu\",\"title\":\"r\"}", "]}]}", "response[0].sections[0].rows",
         REQUEST_MAX_ROWS},
        /* ten rows in all, over several sections */
        {"{\"type\":\"LIST\",\"text\":\"t\",\"button\":\"b\",\"sections\":[",
         "{\"title\":\"s%zu\",\"rows\":[{\"id\":\"1\",\"title\":\"r\"},{\"id\":\"2\",\"title\":"
         "\"r\"}]}",
         "]}", "response[0].sections", REQUEST_MAX_ROWS / 2},
    };
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        for (size_t n = counts[i].max; n <= counts[i].max + 1; n++) {
            list = items(counts[i].item, n);
            buf_add(&b, "%s%s%s", counts[i].head, list, counts[i].tail);
            one_response(b.s, n == counts[i].max ? 0 : BG_ERR_LIMIT, counts[i].name);
            free(list);
            buf_free(&b);
        }
    }

    /* lengths in characters: at the limit, one over */
    static const struct {
        const char *head, *tail, *name;
        size_t max;
    } lengths[] = {
        {"{\"type\":\"TEXT\",\"text\":\"a\",\"quickReplies\":[{\"title\":\"t\",\"payload\":\"",
         "\"}]}", "response[0].quickReplies[0].payload", REQUEST_MAX_PAYLOAD},
        {"{\"type\":\"BUTTON\",\"text\":\"a\",\"buttons\":[{\"type\":\"url\",\"url\":\"https://x\","
         "\"title\":\"",
         "\"}]}", "response[0].buttons[0].title", REQUEST_MAX_TITLE},
        {"{\"type\":\"CAROUSEL\",\"cards\":[{\"title\":\"", "\"}]}", "response[0].cards[0].title",
         REQUEST_MAX_CARD_TITLE},
        {"{\"type\":\"CAROUSEL\",\"cards\":[{\"title\":\"t\",\"subtitle\":\"", "\"}]}",
         "response[0].cards[0].subtitle", REQUEST_MAX_CARD_TITLE},
        {"{\"type\":\"LIST\",\"text\":\"t\",\"button\":\"b\",\"sections\":[{\"rows\":[{\"title\":"
         "\"r\","
         "\"id\":\"",
         "\"}]}]}", "response[0].sections[0].rows[0].id", REQUEST_MAX_ROW_ID},
    };
    for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        for (size_t n = lengths[i].max; n <= lengths[i].max + 1; n++) {
            buf_add(&b, "%s", lengths[i].head);
            buf_rep(&b, "\xe2\x82\xac", n); /* three bytes, one character */
            buf_add(&b, "%s", lengths[i].tail);
            one_response(b.s, n == lengths[i].max ? 0 : BG_ERR_LIMIT, lengths[i].name);
            buf_free(&b);
        }
    }
}

/* A tree's stored response may hold templates where a number or a URL goes: checked once
 * rendered. */
static void test_response_templated(void **state)
{
    json_t *r = json_loads("{\"type\":\"LOCATION\",\"latitude\":\"{{lat}}\",\"longitude\":2,"
                           "\"fallback\":{\"type\":\"IMAGE\",\"url\":\"{{u}}\"}}",
                           0, NULL);
    bg_error_t err;

    (void)state;
    assert_int_equal(request_check_response_flags(r, "r", REQUEST_CHECK_TEMPLATED, &err), 0);
    assert_int_equal(request_check_response(r, "r", &err), -1);
    assert_int_equal(err.code, BG_ERR_MISSING_PARAM);
    json_decref(r);
}

static void test_send_response_count(void **state)
{
    buf_t b = {0};
    send_request_t req;

    (void)state;
    build_n_responses(&b, "response", REQUEST_MAX_RESPONSES);
    send_ok(b.s, &req);
    assert_int_equal(json_array_size(req.responses), 50);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(req.responses, 49), "text")), "m49");
    request_send_free(&req);
    buf_free(&b);

    build_n_responses(&b, "response", REQUEST_MAX_RESPONSES + 1);
    send_fails(b.s, BG_ERR_LIMIT, NULL);
    buf_free(&b);

    build_n_responses(&b, "responses", REQUEST_MAX_RESPONSES + 1);
    send_fails(b.s, BG_ERR_LIMIT, NULL);
    buf_free(&b);

    build_n_responses(&b, "response", 200);
    send_fails(b.s, BG_ERR_LIMIT, NULL);
    buf_free(&b);
}

static void test_redirect_fields(void **state)
{
    redirect_request_t req;
    json_t *want;

    (void)state;
    /* everything given */
    redirect_ok("{\"channelId\":\"C1\",\"memberId\":\"M1\",\"recipientId\":null,\"redirect\":{"
                "\"tree\":\"T1\",\"nodeCompositeId\":\"N1\",\"runPreAction\":false,"
                "\"sendResponse\":true,\"runPostAction\":false},\"meta\":{\"orderId\":\"42\","
                "\"n\":[1,{\"x\":null}]}}",
                &req);
    assert_string_equal(req.target.channel_id, "C1");
    assert_string_equal(req.target.member_id, "M1");
    assert_null(req.target.recipient_id);
    assert_string_equal(req.tree, "T1");
    assert_string_equal(req.node_id, "N1");
    assert_int_equal(req.run_pre, 0);
    assert_int_equal(req.send_response, 1);
    assert_int_equal(req.run_post, 0);
    want = json_loads("{\"orderId\":\"42\",\"n\":[1,{\"x\":null}]}", 0, NULL);
    assert_true(json_equal(req.meta, want));
    assert_ptr_equal(req.meta, json_object_get(req.root, "meta"));
    json_decref(want);
    request_redirect_free(&req);
    assert_null(req.root);
    assert_null(req.meta);

    /* the three flags default to 1, also when null; meta defaults to {} */
    redirect_ok("{\"channelId\":\"C1\",\"recipientId\":\"R1\"," REDIRECT "}", &req);
    assert_null(req.target.member_id);
    assert_string_equal(req.target.recipient_id, "R1");
    assert_int_equal(req.run_pre, 1);
    assert_int_equal(req.send_response, 1);
    assert_int_equal(req.run_post, 1);
    assert_true(json_is_object(req.meta));
    assert_int_equal(json_object_size(req.meta), 0);
    request_redirect_free(&req);

    redirect_ok("{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\","
                "\"runPreAction\":null,\"sendResponse\":false,\"runPostAction\":null},"
                "\"meta\":null}",
                &req);
    assert_int_equal(req.run_pre, 1);
    assert_int_equal(req.send_response, 0);
    assert_int_equal(req.run_post, 1);
    assert_true(json_is_object(req.meta));
    assert_int_equal(json_object_size(req.meta), 0);
    request_redirect_free(&req);

    /* each flag on its own */
    redirect_ok("{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\","
                "\"runPostAction\":false}}",
                &req);
    assert_int_equal(req.run_pre, 1);
    assert_int_equal(req.send_response, 1);
    assert_int_equal(req.run_post, 0);
    request_redirect_free(&req);
    redirect_ok("{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\","
                "\"runPreAction\":false,\"sendResponse\":false,\"runPostAction\":false}}",
                &req);
    assert_int_equal(req.run_pre + req.send_response + req.run_post, 0);
    request_redirect_free(&req);

    /* an empty meta object stays the caller's */
    redirect_ok("{" TARGET "," REDIRECT ",\"meta\":{}}", &req);
    assert_ptr_equal(req.meta, json_object_get(req.root, "meta"));
    assert_int_equal(json_object_size(req.meta), 0);
    request_redirect_free(&req);
}

static void test_redirect_errors(void **state)
{
    static const struct {
        const char *body;
        int code;
        const char *name;
    } cases[] = {
        {"{\"memberId\":\"M1\"," REDIRECT "}", 108, "channelId"},
        {"{\"channelId\":7,\"memberId\":\"M1\"," REDIRECT "}", 108, "channelId"},
        {"{\"channelId\":\"C1\"," REDIRECT "}", 108, "memberId"},
        {"{\"channelId\":\"C1\",\"memberId\":[]," REDIRECT "}", 108, "memberId"},
        {"{\"channelId\":\"C1\",\"recipientId\":{}," REDIRECT "}", 108, "recipientId"},
        {"{" TARGET "}", 108, "redirect"},
        {"{" TARGET ",\"redirect\":null}", 108, "redirect"},
        {"{" TARGET ",\"redirect\":\"T1\"}", 108, "redirect"},
        {"{" TARGET ",\"redirect\":[\"T1\",\"N1\"]}", 108, "redirect"},
        {"{" TARGET ",\"redirect\":{}}", 108, "redirect.tree"},
        {"{" TARGET ",\"redirect\":{\"nodeCompositeId\":\"N1\"}}", 108, "redirect.tree"},
        {"{" TARGET ",\"redirect\":{\"tree\":null,\"nodeCompositeId\":\"N1\"}}", 108,
         "redirect.tree"},
        {"{" TARGET ",\"redirect\":{\"tree\":1,\"nodeCompositeId\":\"N1\"}}", 108, "redirect.tree"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"\",\"nodeCompositeId\":\"N1\"}}", 108,
         "redirect.tree"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T{1}\",\"nodeCompositeId\":\"N1\"}}", 108,
         "redirect.tree"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T\\n1\",\"nodeCompositeId\":\"N1\"}}", 108,
         "redirect.tree"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\"}}", 108, "redirect.nodeCompositeId"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":false}}", 108,
         "redirect.nodeCompositeId"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"\"}}", 108,
         "redirect.nodeCompositeId"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"}\"}}", 108,
         "redirect.nodeCompositeId"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N\\u0000\"}}", 108, NULL},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\","
         "\"runPreAction\":\"yes\"}}",
         108, "redirect.runPreAction"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\","
         "\"runPreAction\":1}}",
         108, "redirect.runPreAction"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\","
         "\"sendResponse\":0}}",
         108, "redirect.sendResponse"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\","
         "\"runPostAction\":\"false\"}}",
         108, "redirect.runPostAction"},
        {"{" TARGET ",\"redirect\":{\"tree\":\"T1\",\"nodeCompositeId\":\"N1\","
         "\"runPostAction\":{}}}",
         108, "redirect.runPostAction"},
        {"{" TARGET "," REDIRECT ",\"meta\":[]}", 108, "meta"},
        {"{" TARGET "," REDIRECT ",\"meta\":\"{}\"}", 108, "meta"},
        {"{" TARGET "," REDIRECT ",\"meta\":1}", 108, "meta"},
        {"{" TARGET "," REDIRECT ",\"meta\":false}", 108, "meta"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        redirect_fails(cases[i].body, cases[i].code, cases[i].name);
}

static void test_redirect_id_lengths(void **state)
{
    static const char *const fields[] = {"tree", "nodeCompositeId"};
    static const char *const names[] = {"redirect.tree", "redirect.nodeCompositeId"};

    (void)state;
    for (size_t f = 0; f < 2; f++) {
        for (int n = REQUEST_MAX_ID; n <= REQUEST_MAX_ID + 1; n++) {
            buf_t b = {0};

            buf_add(&b, "{" TARGET ",\"redirect\":{\"%s\":\"X\",\"%s\":\"", fields[1 - f],
                    fields[f]);
            buf_rep(&b, "i", (size_t)n);
            buf_add(&b, "\"}}");
            if (n == REQUEST_MAX_ID) {
                redirect_request_t req;
                redirect_ok(b.s, &req);
                assert_int_equal(strlen(f == 0 ? req.tree : req.node_id), REQUEST_MAX_ID);
                request_redirect_free(&req);
            } else {
                redirect_fails(b.s, BG_ERR_LIMIT, names[f]);
            }
            buf_free(&b);
        }
    }
}

/* tree and nodeCompositeId refuse what the target ids refuse, C1 controls and U+2028 too */
static void test_redirect_id_characters(void **state)
{
    static const char *const fields[] = {"tree", "nodeCompositeId"};
    static const char *const names[] = {"redirect.tree", "redirect.nodeCompositeId"};
    static const char *const refused[] = {"a\\u0085b",     "\\u0080",   "a\xc2\x9f", "\\u2028",
                                          "a\xe2\x80\xa9", "a\\u001fb", "{x}"};

    (void)state;
    for (size_t f = 0; f < 2; f++) {
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
            buf_t b = {0};

            buf_add(&b, "{" TARGET ",\"redirect\":{\"%s\":\"X\",\"%s\":\"%s\"}}", fields[1 - f],
                    fields[f], refused[i]);
            redirect_fails(b.s, BG_ERR_MISSING_PARAM, names[f]);
            buf_free(&b);
        }
    }
}

static void test_normalize_phone(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"+852 9123-4567", "85291234567"},
        {"(852) 9123 4567", "85291234567"},
        {"+1 (415) 555-0100", "14155550100"},
        {"85291234567", "85291234567"},
        {"", ""},
        {"+-() ", ""},
        {"+44 20 7946 0958", "442079460958"},
        {"12.34/56", "12.34/56"}, /* only the five listed characters go */
    };
    char out[32];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(out, 'Z', sizeof(out));
        request_normalize_phone(cases[i].in, out, sizeof(out));
        assert_string_equal(out, cases[i].out);
    }
    /* the output is cut to fit and always terminated */
    memset(out, 'Z', sizeof(out));
    request_normalize_phone("+852 9123 4567", out, 5);
    assert_string_equal(out, "8529");
    assert_int_equal(out[5], 'Z');
    request_normalize_phone("+852", out, 1);
    assert_string_equal(out, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_minimal),
        cmocka_unit_test(test_send_member_and_recipient),
        cmocka_unit_test(test_send_target_errors),
        cmocka_unit_test(test_send_id_characters),
        cmocka_unit_test(test_send_id_lengths),
        cmocka_unit_test(test_send_recipient_length),
        cmocka_unit_test(test_redirect_id_characters),
        cmocka_unit_test(test_send_response_synonym),
        cmocka_unit_test(test_send_shapes),
        cmocka_unit_test(test_send_shape_errors),
        cmocka_unit_test(test_send_unknown_type),
        cmocka_unit_test(test_response_types),
        cmocka_unit_test(test_response_templated),
        cmocka_unit_test(test_send_response_count),
        cmocka_unit_test(test_redirect_fields),
        cmocka_unit_test(test_redirect_errors),
        cmocka_unit_test(test_redirect_id_lengths),
        cmocka_unit_test(test_normalize_phone),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
