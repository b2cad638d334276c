/* fuzz_jparse.c - libFuzzer target for json/jparse.c, against jansson itself: any input that
 * jansson's json_loadb (JSON_DECODE_ANY) reads must come out of jparse_value as an equal value,
 * and anything jansson refuses jparse must refuse too; jparse_value_unique likewise against
 * json_loadb with JSON_REJECT_DUPLICATES. The one allowed difference is depth:
 * jparse stops at 64 levels (the request parser's own limit) where jansson goes on to 2048.
 * Both read the input up to its first NUL byte: jansson's buffer reader takes a NUL for the end
 * of the input, jparse refuses it (botgate's texts never hold one). */
#include "fuzz_util.h"

#include "json/jparse.h"

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

/* One reading of jparse against jansson's of the same text with the same flags. */
static void compare(const char *text, size_t size, json_t *(*reader)(const char *, size_t),
                    size_t flags, const char *name)
{
    json_error_t e;
    json_t *mine = reader(text, size);
    json_t *theirs = json_loadb(text, size, JSON_DECODE_ANY | flags, &e);

    if (theirs != NULL && mine == NULL)
        FUZZ_CHECK(depth_of(theirs) > 64, "%s refused what jansson reads (depth %zu)", name,
                   depth_of(theirs));
    FUZZ_CHECK(!(mine != NULL && theirs == NULL), "%s read what jansson refuses: %s", name, e.text);
    if (mine != NULL && theirs != NULL)
        FUZZ_CHECK(json_equal(mine, theirs), "%s and jansson read different values", name);
    json_decref(mine);
    json_decref(theirs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);

    if (nul != NULL)
        size = (size_t)(nul - data);
    compare((const char *)data, size, jparse_value, 0, "jparse_value");
    /* duplicate keys refused, as the request parser reads a body */
    compare((const char *)data, size, jparse_value_unique, JSON_REJECT_DUPLICATES,
            "jparse_value_unique");
    return 0;
}
