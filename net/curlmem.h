/* curlmem.h - libcurl's memory: its easy handles at their own size (see curlmem.c). */
#ifndef BOTGATE_NET_CURLMEM_H
#define BOTGATE_NET_CURLMEM_H

/* curl_global_init, with libcurl's allocations routed through curlmem. 0 or -1. */
int curlmem_global_init(void);

/* curl_global_cleanup: after every client (net_free) is gone. The region stays reserved. */
void curlmem_global_cleanup(void);

#endif
