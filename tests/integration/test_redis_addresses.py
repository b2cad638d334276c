"""A Redis URL whose host name resolves to ::1 first, then 127.0.0.1, with Redis listening on
127.0.0.1 alone (what `localhost` does on many systems): botgate tries the second address when
the first fails, and its log says which address failed and why. It connected to the first
resolved address only, and never came up.

The name is made up and resolved by a getaddrinfo() wrapper loaded with LD_PRELOAD (the hosts
file is the machine's, not the test's): it answers "redis-two.test" with ::1, then 127.0.0.1,
and passes every other name on. It changes nothing of botgate itself."""
import os
import shutil
import subprocess
import unittest

from harness import Stack, http

NAME = "redis-two.test"

TWO_ADDRESSES_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <string.h>

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **) =
        (int (*)(const char *, const char *, const struct addrinfo *, struct addrinfo **))
            dlsym(RTLD_NEXT, "getaddrinfo");
    struct addrinfo *six = NULL, *four = NULL, *tail;
    int rc;

    if (node == NULL || strcmp(node, "%s") != 0)
        return real(node, service, hints, res);
    if ((rc = real("::1", service, hints, &six)) != 0)
        return rc;
    if ((rc = real("127.0.0.1", service, hints, &four)) != 0) {
        freeaddrinfo(six);
        return rc;
    }
    for (tail = six; tail->ai_next != NULL; tail = tail->ai_next)
        ;
    tail->ai_next = four; /* freeaddrinfo frees the nodes one by one */
    *res = six;
    return 0;
}
""" % NAME


class TwoAddresses(unittest.TestCase):
    def setUp(self):
        cc = shutil.which("cc")
        if cc is None:
            self.skipTest("no C compiler for the resolver wrapper")
        self.s = Stack(workers=1, start_gateway=False)
        self.shim = os.path.join(self.s.dir, "two.so")
        src = os.path.join(self.s.dir, "two.c")
        with open(src, "w") as f:
            f.write(TWO_ADDRESSES_C)
        subprocess.run([cc, "-shared", "-fPIC", "-o", self.shim, src, "-ldl"], check=True)

    def tearDown(self):
        codes = self.s.close()
        self.assertEqual(codes.get("botgate"), 0, self.s.all_output()[-5000:])
        self.s.cleanup_dir()

    def test_second_address_when_the_first_refuses(self):
        s = self.s
        # Redis is bound to 127.0.0.1 alone (harness.py): ::1 is refused or unreachable
        s.start_gateway(extra={
            "BOTGATE_REDIS_URL": "redis://%s:%d/0" % (NAME, s.redis_port),
            "LD_PRELOAD": self.shim,
            # the sanitizers' runtime wants to be first; the wrapper only wraps getaddrinfo
            "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"})
        self.assertEqual(http("GET", s.url + "/readyz").status, 200)
        with open(s.log_path) as f:
            log = f.read()
        said = "redis connected to 127.0.0.1:%d (cannot connect to ::1:%d: " % (
            s.redis_port, s.redis_port)
        self.assertIn(said, log)


if __name__ == "__main__":
    unittest.main()
