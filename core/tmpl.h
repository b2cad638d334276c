/* tmpl.h - {{path}} placeholders in node responses and actions (contract.md section 6). */
#ifndef BOTGATE_CORE_TMPL_H
#define BOTGATE_CORE_TMPL_H

#include <jansson.h>

/* Replaces every "{{ path }}" of s (spaces and tabs around the path allowed) with the value at
 * path in scope, an object with the roots agendaMeta, member and channel. Paths are
 * dot-separated; an all-digit segment indexes an array. A value renders as: string -> itself,
 * number -> its JSON text (reals in their shortest round-trip form), true/false -> "true" /
 * "false", null or a missing path -> "", object/array -> compact JSON. channel.info and
 * everything under it render "" (and "{{channel}}" leaves it out). An unclosed "{{" stays as
 * it is; inserted text is never expanded again. s NULL renders "". Returns a malloc'd string
 * the caller frees; NULL only when out of memory. */
char *tmpl_render(const char *s, const json_t *scope);

/* The same for a URL: every inserted value is percent-encoded (all but A-Z a-z 0-9 - . _ ~),
 * so a value can fill a path segment or a query value but never change the host, the path
 * structure or add query parameters. Used on webhook URLs. */
char *tmpl_render_url(const char *s, const json_t *scope);

/* A deep copy of v in which every string value (not object keys) is rendered with
 * tmpl_render. Since values are replaced one by one, the result is valid JSON whatever the
 * inserted text holds. New reference; NULL when v is NULL or out of memory. */
json_t *tmpl_render_json(const json_t *v, const json_t *scope);

/* The scope {"agendaMeta":..,"member":..,"channel":..}: deep copies of the three (an empty
 * object for NULL or a non-object), the channel copy without "info". New reference. */
json_t *tmpl_scope(const json_t *agenda_meta, const json_t *member, const json_t *channel);

#endif
