/* resp.c - Redis commands in their wire form (resp.h). */
#include "resp.h"

#include <stdlib.h>
#include <string.h>

char *resp_count(char *p, char tag, size_t n)
{
    char digits[RESP_COUNT_SIZE], *d = digits + sizeof(digits);
    size_t len;

    do
        *--d = (char)('0' + n % 10);
    while ((n /= 10) != 0);
    len = (size_t)(digits + sizeof(digits) - d);
    *p++ = tag;
    memcpy(p, d, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

char *resp_bulk(char *p, const char *s, size_t len)
{
    p = resp_count(p, '$', len);
    memcpy(p, s, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

size_t resp_command_size(int argc, const size_t *lens)
{
    size_t size = RESP_COUNT_SIZE;

    for (int i = 0; i < argc; i++)
        size += RESP_COUNT_SIZE + lens[i] + 2;
    return size;
}

size_t resp_command(char *p, int argc, const char *const *argv, const size_t *lens)
{
    char *start = p;

    p = resp_count(p, '*', (size_t)argc);
    for (int i = 0; i < argc; i++)
        p = resp_bulk(p, argv[i], lens[i]);
    return (size_t)(p - start);
}

char *resp_format(int argc, const char *const *argv, const size_t *lens, size_t *len)
{
    size_t size = RESP_COUNT_SIZE;
    char *buf, *p;

    for (int i = 0; i < argc; i++)
        size += RESP_COUNT_SIZE + (lens != NULL ? lens[i] : strlen(argv[i])) + 2;
    if ((buf = malloc(size)) == NULL)
        return NULL;
    p = resp_count(buf, '*', (size_t)argc);
    for (int i = 0; i < argc; i++)
        p = resp_bulk(p, argv[i], lens != NULL ? lens[i] : strlen(argv[i]));
    *len = (size_t)(p - buf);
    return buf;
}
