/* prefer.h - the Prefer request header (RFC 7240): which preferences a request states. */
#ifndef BOTGATE_CORE_PREFER_H
#define BOTGATE_CORE_PREFER_H

/* Reads one Prefer header's value: 1 when it states respond-async (a preference of that
 * name, case-insensitive, with no value), 0 when it does not, -1 when the value is not the
 * header's syntax (1#preference; a preference is token [= word] *(; parameter), a word a token
 * or a quoted string). Other preferences and every parameter are ignored, as RFC 7240 asks of
 * a server that does not know them. */
int prefer_respond_async(const char *value);

#endif
