/* script_member.h - private to the sandbox: a run's member changes (script_member.c). */
#ifndef BOTGATE_SCRIPT_SCRIPT_MEMBER_H
#define BOTGATE_SCRIPT_SCRIPT_MEMBER_H

#include "../core/error.h"

#include <jansson.h>

/* The member ops from old to now (only the fields a script may change: script_run_member_ops);
 * *after gets old with them applied (new reference) when there are some. NULL with err (126)
 * when a change breaks the set rules or memory ran out. */
json_t *script_member_ops(const json_t *old, const json_t *now, json_t **after, bg_error_t *err);

#endif
