/* fuzz_jparse.c - libFuzzer target for core/jparse.c, against jansson itself: any input that
 * jansson's json_loadb (JSON_DECODE_ANY) reads must come out of jparse_value as an equal value,
 * and anything jansson refuses jparse must refuse too. The one allowed difference is depth:
 * jparse stops at 64 levels (the request parser's own limit) where jansson goes on to 2048.
 * Both read the input up to its first NUL byte: jansson's buffer reader takes a NUL for the end
 * of the input, jparse refuses it (botgate's texts never hold one). */
#include "fuzz_util.h"

#include "core/jparse.h"

static size_t depth_of(const json_t *v)
{
    size_t most = 0, d, i;
    const char *key;
    json_t *item;

    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, item)
            if ((d = depth_of(item)) > most)
                most = d;
        return most + 1;
    }
    if (json_is_array(v)) {
        json_array_foreach(v, i, item)
            if ((d = depth_of(item)) > most)
                most = d;
        return most + 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t e;
    const uint8_t *nul = memchr(data, 0, size);
    json_t *mine, *theirs;

    if (nul != NULL)
        size = (size_t)(nul - data);
    mine = jparse_value((const char *)data, size);
    theirs = json_loadb((const char *)data, size, JSON_DECODE_ANY, &e);

    if (theirs != NULL && mine == NULL)
        FUZZ_CHECK(depth_of(theirs) > 64, "jparse refused what jansson reads (depth %zu)",
                   depth_of(theirs));
    FUZZ_CHECK(!(mine != NULL && theirs == NULL), "jparse read what jansson refuses: %s",
               e.text);
    if (mine != NULL && theirs != NULL)
        FUZZ_CHECK(json_equal(mine, theirs), "jparse and jansson read different values");
    json_decref(mine);
    json_decref(theirs);
    return 0;
}
