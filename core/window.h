/* window.h - conversation windows (contract.md section 14): whether a response may go to a
 * member now, from when botgate last saw the member write. Pure: the time is passed in.
 *
 * whatsapp and whatsapp-cloud: 24 h after the member's last inbound message, a TEMPLATE
 * always; facebook: 24 h, a response with a messageTag always; wechat: 48 h; slack and teamwork
 * have no window. A member botgate never saw write (no lastInboundAt) is sent to: the
 * platform's own refusal then says (adapters map it to 127). */
#ifndef BOTGATE_CORE_WINDOW_H
#define BOTGATE_CORE_WINDOW_H

#include "error.h"

#include <jansson.h>
#include <stdint.h>

/* What window_last_inbound answers when botgate never saw the member write. */
#define WINDOW_NEVER INT64_MIN

/* The hours of a channel type's window; 0 when its platform has none. */
int window_hours(const char *channel_type);

/* member.lastInboundAt in ms since the epoch. The record stores an integer (ms, as createdAt
 * and updatedAt); an ISO-8601 date and time ("2026-11-28T09:30:00.250Z", an offset
 * "+08:00" / "+0800", none meaning UTC) and a real number of ms are read too, so that a record
 * another writer made still counts. WINDOW_NEVER when absent, null or not readable. */
int64_t window_last_inbound(const json_t *member);

/* Whole hours since the member last wrote when the window of channel_type is closed at now_ms;
 * -1 when it is open: the platform has none, botgate never saw the member write
 * (WINDOW_NEVER), or the last message is younger than the window (or dated in the future). */
int64_t window_closed_hours(const char *channel_type, int64_t last_ms, int64_t now_ms);

/* 1 when response goes whatever the window: a TEMPLATE (or a NATIVE "template" message) on the
 * whatsapp kinds; on facebook a response with a messageTag, or a NATIVE message that says
 * "messaging_type":"MESSAGE_TAG". */
int window_exempt(const char *channel_type, const json_t *response);

/* The 127 of a response refused by a closed window, hours after the member last wrote, with
 * the platform's way out in the message. Returns -1. */
int window_error(bg_error_t *err, const char *channel_type, int64_t hours);

/* The channel's info.windowTemplate: a TEMPLATE response object, as a request writes one
 * ({"type":"TEMPLATE","elementName":..,"languageCode":..,"components":[..]}, no fallback), sent
 * instead of a response that a closed window refuses. NULL when info has none, or, with err
 * saying what is wrong with it (108), when it is not such an object. Borrowed from info. */
const json_t *window_channel_template(const json_t *info, bg_error_t *err);

/* window_error, and when info holds a windowTemplate that is not usable
 * (window_channel_template), what is wrong with it: the operator's mistake is told where it
 * shows. Returns -1. */
int window_refusal(bg_error_t *err, const char *channel_type, int64_t hours, const json_t *info);

/* The rule in one: 0 when response may go to a member who last wrote at last_ms (WINDOW_NEVER:
 * never seen) at now_ms; else -1 with err 127 (window_error). */
int window_check(const char *channel_type, int64_t last_ms, int64_t now_ms, const json_t *response,
                 bg_error_t *err);

#endif
