/* resp.h - Redis commands in their wire form (RESP arrays of bulk strings), written straight
 * into a buffer: hiredis's own formatter builds each one through sds and a printf of its own.
 * Every command botgate sends is written here. */
#ifndef BOTGATE_STORE_RESP_H
#define BOTGATE_STORE_RESP_H

#include <stddef.h>

/* Room for a count line ("*<n>\r\n" or "$<n>\r\n") of any size_t. */
#define RESP_COUNT_SIZE 24

/* "<tag><n>\r\n" at p; returns the end. */
char *resp_count(char *p, char tag, size_t n);

/* A bulk string at p; returns the end. */
char *resp_bulk(char *p, const char *s, size_t len);

/* The bytes resp_command may write for argc words of the given lengths (an upper bound). */
size_t resp_command_size(int argc, const size_t *lens);

/* The command of argc words at p (at least resp_command_size bytes); returns its length. */
size_t resp_command(char *p, int argc, const char *const *argv, const size_t *lens);

/* The command of argc words in a buffer of its own (malloc'd, the caller frees it), its length
 * in *len; lens NULL: each word is a C string. NULL when out of memory. */
char *resp_format(int argc, const char *const *argv, const size_t *lens, size_t *len);

#endif
