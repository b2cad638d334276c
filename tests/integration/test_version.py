"""What an operator asks of a server on day two: its version (both binaries, /metrics), its
man pages (complete, installed), a warning for a misspelt BOTGATE_* variable, and an error
line when Redis cannot be reached at start."""
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import BIN, StackTest, free_port, http, wait_for

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))


def run(*args, env=None):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=env)


class Version(unittest.TestCase):
    def test_both_binaries_print_one_version(self):
        gw = run(os.path.join(BIN, "botgate"), "--version")
        ctl = run(os.path.join(BIN, "botgatectl"), "--version")
        self.assertEqual((gw.returncode, ctl.returncode), (0, 0), gw.stderr + ctl.stderr)
        m = re.fullmatch(r"botgate (\S+)\n", gw.stdout)
        self.assertIsNotNone(m, gw.stdout)
        self.assertEqual(ctl.stdout, "botgatectl %s\n" % m.group(1))
        with open(os.path.join(ROOT, "VERSION")) as f:
            release = f.readline().strip()
        version = m.group(1)
        named = re.search(r"-g([0-9a-f]{7,40})", version)
        if os.path.isdir(os.path.join(ROOT, ".git")) and named:
            # built from this checkout: the commit it names is HEAD or one before it (a build
            # made before the last commit still says the commit it was built from)
            ancestor = run("git", "-C", ROOT, "merge-base", "--is-ancestor", named.group(1), "HEAD")
            self.assertEqual(ancestor.returncode, 0, "%s is not a commit of HEAD's history"
                             % named.group(1))
        self.assertTrue(version.startswith(release) or re.match(r"\d+\.\d+", version), version)

    def test_short_flag_and_help_mention_it(self):
        self.assertEqual(run(os.path.join(BIN, "botgate"), "-V").returncode, 0)
        self.assertIn("--version", run(os.path.join(BIN, "botgate"), "--help").stdout)
        self.assertIn("--version", run(os.path.join(BIN, "botgatectl"), "--help").stdout)


class ManPages(unittest.TestCase):
    def page(self, name):
        with open(os.path.join(ROOT, "docs/man", name + ".8")) as f:
            return f.read()

    def test_every_setting_is_in_the_man_page(self):
        settings = re.findall(r"^  (BOTGATE_\w+)",
                              run(os.path.join(BIN, "botgate"), "--help").stdout, re.M)
        self.assertGreater(len(settings), 20)
        page = self.page("botgate")
        missing = [s for s in settings if ".B %s\n" % s not in page]
        self.assertEqual(missing, [], "settings missing from docs/man/botgate.8")

    def test_every_command_is_in_the_ctl_man_page(self):
        usage = run(os.path.join(BIN, "botgatectl"), "--help").stdout
        commands = re.findall(r"^  (\w+ \w+|get)\b", usage, re.M)
        self.assertGreater(len(commands), 5)
        page = self.page("botgatectl").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "")
        for c in commands:
            self.assertIn(".B " + c, page)

    @unittest.skipUnless(shutil.which("groff"), "groff checks the pages' syntax")
    def test_pages_render_without_warnings(self):
        for name in ("botgate", "botgatectl"):
            r = run("groff", "-man", "-Tutf8", "-ww", "-z",
                    os.path.join(ROOT, "docs/man", name + ".8"))
            self.assertEqual((r.returncode, r.stderr), (0, ""), name)

    def test_install_puts_the_pages_and_the_license_in_place(self):
        build = os.path.dirname(os.path.abspath(BIN))
        dest = tempfile.mkdtemp()
        try:
            r = run("cmake", "--install", build, "--prefix", "/usr/local",
                    env=dict(os.environ, DESTDIR=dest))
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for path in ("share/man/man8/botgate.8", "share/man/man8/botgatectl.8",
                         "share/doc/botgate/LICENSE", "share/doc/botgate/CHANGELOG.md",
                         "bin/botgate", "bin/botgatectl"):
                self.assertTrue(os.path.isfile(os.path.join(dest, "usr/local", path)), path)
        finally:
            shutil.rmtree(dest, ignore_errors=True)


class Start(StackTest):
    stack_args = {"workers": 1,
                  "env": {"BOTGATE_LISTN": "127.0.0.1:1", "BOTGATE_WORKRES": "4",
                          "BOTGATE_ZZZ_NOT_A_SETTING": "1"}}

    def test_build_info_metric_names_the_version(self):
        version = run(os.path.join(BIN, "botgate"), "--version").stdout.split()[1]
        m = http("GET", self.s.url + "/metrics")
        self.assertEqual(m.status, 200)
        self.assertRegex(m.raw, r'(?m)^botgate_build_info\{version="%s",libevent="2\.[^"]+"\} 1$'
                         % re.escape(version))
        self.assertIn("# TYPE botgate_build_info gauge", m.raw)

    def test_misspelt_variables_are_warned_about(self):
        log = self.s.gateway_log()
        self.assertIn("unknown variable BOTGATE_LISTN ignored: did you mean BOTGATE_LISTEN?", log)
        self.assertIn("unknown variable BOTGATE_WORKRES ignored: did you mean BOTGATE_WORKERS?",
                      log)
        self.assertIn("unknown variable BOTGATE_ZZZ_NOT_A_SETTING ignored (botgate --help", log)
        # the known ones are not named
        self.assertNotIn("unknown variable BOTGATE_REDIS_URL", log)
        self.assertNotIn("unknown variable BOTGATE_LISTEN ", log)

    def test_unreachable_redis_is_an_error_line(self):
        closed = free_port()  # nothing listens there
        env = dict(self.s.gateway_env(), BOTGATE_LISTEN="127.0.0.1:%d" % free_port(),
                   BOTGATE_REDIS_URL="redis://127.0.0.1:%d/0" % closed,
                   BOTGATE_REDIS_CLUSTER=None, BOTGATE_REDIS_SENTINELS=None,
                   BOTGATE_LOG_LEVEL="error")
        env = {k: v for k, v in env.items() if v is not None}
        with tempfile.TemporaryFile() as err:
            p = subprocess.Popen([os.path.join(BIN, "botgate")], env=env,
                                 stdout=subprocess.DEVNULL, stderr=err)
            try:
                def said():
                    err.seek(0)
                    return b"redis unreachable" in err.read()
                wait_for(said, timeout=20, what="the error line for an unreachable Redis")
                # still running: it keeps retrying
                time.sleep(0.3)
                self.assertIsNone(p.poll())
            finally:
                p.terminate()
                p.wait(20)
            err.seek(0)
            lines = [l for l in err.read().decode().splitlines() if "redis unreachable" in l]
        self.assertTrue(lines)
        self.assertIn('"level":"error"', lines[0])
        self.assertIn("127.0.0.1:%d" % closed, lines[0] + "".join(lines))


if __name__ == "__main__":
    unittest.main()
