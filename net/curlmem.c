/* curlmem.c - libcurl's allocations: its 1-8 KiB blocks from a fitpool, the rest from malloc.
 * There is an easy handle per transfer in flight, thousands at once, and the allocator's size
 * class for it is 15 % larger than the handle, for its receive buffer 25 % (bench/README.md). The
 * pool's region is reserved address space: a page costs memory once a block on it is used. The lock
 * is taken only for those blocks, a few per transfer; every other call of libcurl's goes straight
 * to malloc and free after one comparison. */
#include "curlmem.h"

#include "fitpool.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Address space, not memory: about 40,000 transfers' blocks, then they come from malloc as
 * before. */
#define REGION (256u * 1024 * 1024)

static fitpool_t pool;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The pool's side, out of line: libcurl calls malloc and free a hundred times per transfer
 * (free mostly on NULL), and those calls pass through with a comparison or two. */
__attribute__((noinline)) static void *pool_alloc(size_t size, int zero)
{
    void *p;

    pthread_mutex_lock(&lock);
    p = fitpool_alloc(&pool, size);
    pthread_mutex_unlock(&lock);
    if (p == NULL)
        return zero ? calloc(1, size) : malloc(size);
    return zero ? memset(p, 0, size) : p;
}

__attribute__((noinline)) static void pool_free(void *ptr)
{
    pthread_mutex_lock(&lock);
    fitpool_free(&pool, ptr);
    pthread_mutex_unlock(&lock);
}

static int in_range(size_t size)
{
    return size >= FITPOOL_MIN && size <= FITPOOL_MAX;
}

static void *cm_malloc(size_t size)
{
    return in_range(size) ? pool_alloc(size, 0) : malloc(size);
}

static void *cm_calloc(size_t n, size_t size)
{
    if (size != 0 && n > (size_t)-1 / size)
        return NULL;
    return in_range(n * size) ? pool_alloc(n * size, 1) : calloc(n, size);
}

static void cm_free(void *ptr)
{
    if (ptr == NULL)
        return;
    if (fitpool_owns(&pool, ptr))
        pool_free(ptr);
    else
        free(ptr);
}

static void *cm_realloc(void *ptr, size_t size)
{
    size_t have;
    void *p;

    if (!fitpool_owns(&pool, ptr))
        return realloc(ptr, size);
    have = fitpool_size(ptr);
    if (size <= have && size >= FITPOOL_MIN)
        return ptr;
    if ((p = cm_malloc(size)) == NULL)
        return NULL;
    memcpy(p, ptr, size < have ? size : have);
    cm_free(ptr);
    return p;
}

int curlmem_global_init(void)
{
    void *region = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

    /* without the region (a strict overcommit policy), every block comes from malloc */
    fitpool_init(&pool, region == MAP_FAILED ? NULL : region, REGION);
    if (curl_global_init_mem(CURL_GLOBAL_DEFAULT, cm_malloc, cm_free, cm_realloc, strdup,
                             cm_calloc) != CURLE_OK)
        return -1;
    return 0;
}

void curlmem_global_cleanup(void)
{
    curl_global_cleanup();
}
