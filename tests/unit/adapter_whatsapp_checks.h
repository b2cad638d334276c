/* adapter_whatsapp_checks.h - the check table both whatsapp kinds share (adapter_cases.h):
 * the limits of interactive messages, at the limit and one over, and what they lack. */
#ifndef BOTGATE_TESTS_ADAPTER_WHATSAPP_CHECKS_H
#define BOTGATE_TESTS_ADAPTER_WHATSAPP_CHECKS_H

static const check_case_t whatsapp_check_cases[] = {
    {CHECK_QR(3), 0, NULL},
    /* a messageTag is Messenger's: refused, never dropped */
    {CHECK_ONE("{\"type\":\"TEXT\",\"text\":\"t\",\"messageTag\":\"HUMAN_AGENT\"}"), 108,
     "messageTag"},
    {CHECK_QR(4), 118, "quickReplies"},
    {CHECK_BUTTONS(CHECK_PB "," CHECK_PB "," CHECK_PB), 0, NULL},
    {CHECK_BUTTONS(CHECK_URL), 0, NULL},
    {CHECK_BUTTONS(CHECK_URL "," CHECK_URL), 117, "buttons"},
    {CHECK_BUTTONS(CHECK_PB "," CHECK_PHONE), 117, "buttons"},
    {"{\"type\":\"BUTTON\",\"text\":\"t\",\"buttons\":[{\"type\":\"postback\",\"title\":\"a\","
     "\"payload\":\"",
     "p", 256, "", "\"}]}", 0, NULL},
    {"{\"type\":\"BUTTON\",\"text\":\"t\",\"buttons\":[{\"type\":\"postback\",\"title\":\"a\","
     "\"payload\":\"",
     "p", 257, "", "\"}]}", 118, "payload"},
    {CHECK_ROW("title", "description", 24), 0, NULL},
    {CHECK_ROW("title", "description", 25), 118, "title"},
    {CHECK_ROW("description", "title", 72), 0, NULL},
    {CHECK_ROW("description", "title", 73), 118, "description"},
    {CHECK_ONE("{\"type\":\"STICKER\",\"sticker\":\"like_heart\"}"), 117, "sticker"},
    {CHECK_CARDS(1, ""), 117, "CAROUSEL"},
    {CHECK_LOCATION, 0, NULL},
};

#endif
