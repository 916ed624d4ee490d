"""Tier 1: the parts that need neither the binary nor a kernel."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import unittest
import warnings

from ipybox import ApprovalRequest, CodeExecutor
from ipybox.code_exec import _dotenv_value, _usage_error


class ApprovalRequestTest(unittest.TestCase):
    def test_decisions(self):
        async def run():
            sent = []

            async def respond(accepted):
                sent.append(accepted)

            r = ApprovalRequest("srv", "tool", {"a": 1}, respond)
            seen = []
            r.on_decision(seen.append)
            await r.reject()
            await r.accept()  # only the first decision counts
            late = []
            r.on_decision(late.append)  # registered after the decision: called too
            await asyncio.sleep(0)
            return sent, seen, late, await r.response()

        sent, seen, late, response = asyncio.run(run())
        self.assertEqual((sent, seen, late, response), ([False], [False], [False], False))

    def test_remembered_answers(self):
        async def run():
            sent = []

            async def respond(accepted, content=None):
                sent.append((accepted, content))

            offered = ["allow", "allow-session", "deny-always"]
            r = ApprovalRequest("srv", "tool", {}, respond, why="no rule matched", rule="tool srv.tool args={}", answers=offered)
            self.assertEqual(r.remember, [("accept", "session"), ("reject", "always")])
            with self.assertRaises(ValueError):
                await r.accept(remember="always")  # not offered
            with self.assertRaises(ValueError):
                await r.accept(remember="forever")
            await r.accept(remember="session", rule="tool srv.*")
            plain = ApprovalRequest("srv", "tool", {}, respond)
            with self.assertRaises(ValueError):
                await plain.reject(remember="session")  # no policy: once only
            await plain.reject()
            return sent

        self.assertEqual(asyncio.run(run()), [(True, {"answer": "allow-session", "rule": "tool srv.*"}), (False, None)])

    def test_str_escapes_what_kernel_code_chose(self):
        async def make():
            return ApprovalRequest("srv\x1b[2J", "to\u202eol", {"cmd": "ls\x1b]52;c;x\x07", "k\n": "v"}, None)

        s = str(asyncio.run(make()))
        for bad in ("\x1b", "\u202e", "\x07", "\n"):
            self.assertNotIn(bad, s)
        self.assertEqual(s, "srv\\x1b[2J.to\\u202eol(cmd='ls\\x1b]52;c;x\\x07', k\\n='v')")


class DotEnvTest(unittest.TestCase):
    def test_quoting(self):
        self.assertEqual(_dotenv_value('a"b$c\\d\ne\tf'), '"a\\"b\\$c\\\\d\\ne\\tf"')


class ArgvTest(unittest.TestCase):
    def argv(self, **kw):
        files = []
        ex = CodeExecutor(working_dir="/tmp", **kw)
        argv = ex._argv("/bin/ipybox", files)
        for f in files:
            os.unlink(f)
        return argv

    def test_approval_flags(self):
        for kw, want, allow in (
            ({}, "elicit", False),
            ({"approve_tool_calls": False}, "auto", False),
            ({"approve_tool_calls": False, "approve_shell_cmds": True}, "elicit", True),
            ({"approve_shell_cmds": True}, "elicit", False),
        ):
            with self.subTest(kw=kw):
                argv = self.argv(**kw)
                self.assertEqual(argv[argv.index("--approval") + 1], want)
                self.assertEqual("--allow-tool" in argv, allow)

    def test_host_servers_allowed(self):
        # The application is ipybox mcp's only client: its servers run as
        # configured, not sandboxed or refused as a client's would be.
        self.assertIn("--allow-host-servers", self.argv())

    def test_python(self):
        # python= first; else $IPYBOX_PYTHON (ipybox mcp reads it); else
        # this program's interpreter when it can import ipykernel (a venv
        # with ipykernel, activated or not); else ipybox mcp finds one.
        import importlib.util
        import sys
        from unittest import mock

        argv = self.argv(python="/opt/py/bin/python3")
        self.assertEqual(argv[argv.index("--python") + 1], "/opt/py/bin/python3")
        with mock.patch.dict(os.environ, {"IPYBOX_PYTHON": "/opt/other"}):
            self.assertNotIn("--python", self.argv())
        with mock.patch.dict(os.environ):
            os.environ.pop("IPYBOX_PYTHON", None)
            argv = self.argv()
            if importlib.util.find_spec("ipykernel") is not None:
                self.assertEqual(argv[argv.index("--python") + 1], sys.executable)
            else:
                self.assertNotIn("--python", argv)
            with mock.patch("importlib.util.find_spec", return_value=None):
                self.assertNotIn("--python", self.argv())
            # A venv in the workspace (a project's .venv) is kernel code's
            # to change: ipybox mcp finds another.
            with mock.patch.object(sys, "prefix", "/tmp/proj/.venv"):
                ex = CodeExecutor(working_dir="/tmp")
                self.assertNotIn("--python", ex._argv("/bin/ipybox", []))

    def test_sandbox_flags(self):
        self.assertIn("--no-sandbox", self.argv())
        self.assertIn("--sandbox", self.argv(sandbox=True))
        argv = self.argv(sandbox_config="/etc/srt.json")
        self.assertEqual(argv[argv.index("--sandbox-config") + 1], "/etc/srt.json")
        self.assertNotIn("--no-sandbox", argv)

    def test_secrets_stay_off_the_command_line(self):
        argv = self.argv(kernel_env={"TOKEN": "s3cret"}, mcp_servers={"x": {"command": "y", "env": {"K": "s3cret"}}})
        self.assertNotIn("s3cret", " ".join(argv))
        self.assertIn("--kernel-env-file", argv)
        self.assertIn("--mcp-config", argv)


class BundledBinaryTest(unittest.TestCase):
    """The wheel's own binary is found by go test ./python -run Wheel, from
    real installs; here, what a checkout does."""

    def test_a_checkout_has_none(self):
        # Imported from python/ (not installed): there is no bundled binary,
        # even if some ipybox distribution is installed elsewhere.
        from ipybox.code_exec import _bundled_binary

        self.assertIsNone(_bundled_binary())

    def test_planted_distribution_in_the_current_folder(self):
        # Kernel code writes an ipybox-*.dist-info into the workspace, the
        # host program's current folder, whose RECORD names this module (so
        # that it looks like the distribution it was imported from) and a
        # binary of its own; with '' or the cwd on sys.path, importlib
        # found it first. Variants: the script by a relative RECORD path,
        # by an absolute one, and a .exe under Scripts.
        import importlib
        import ipybox.code_exec as ce

        here = os.path.abspath(ce.__file__)
        for script in ("bin/ipybox", None, "Scripts/ipybox.exe"):
            with self.subTest(script=script), tempfile.TemporaryDirectory() as ws:
                evil = os.path.join(ws, "evil", "bin", "ipybox")
                os.makedirs(os.path.dirname(evil))
                with open(evil, "w") as f:
                    f.write("#!/bin/sh\necho planted\n")
                os.chmod(evil, 0o755)
                rel = script or evil
                if script:
                    os.makedirs(os.path.join(ws, os.path.dirname(script)), exist_ok=True)
                    os.symlink(evil, os.path.join(ws, script))
                info = os.path.join(ws, "ipybox-99.0.dist-info")
                os.mkdir(info)
                with open(os.path.join(info, "METADATA"), "w") as f:
                    f.write("Metadata-Version: 2.1\nName: ipybox\nVersion: 99.0\n")
                with open(os.path.join(info, "RECORD"), "w") as f:
                    f.write(f"{here},,\n{rel},,\nipybox-99.0.dist-info/RECORD,,\n")
                old_cwd, old_path = os.getcwd(), list(sys.path)
                try:
                    os.chdir(ws)
                    sys.path[:0] = ["", ws]
                    importlib.invalidate_caches()
                    got = ce._bundled_binary()
                finally:
                    os.chdir(old_cwd)
                    sys.path[:] = old_path
                    importlib.invalidate_caches()
                self.assertIsNone(got, "a distribution planted in the current folder named the binary")

    def test_install_prefixes(self):
        from ipybox.code_exec import _install_prefixes, _under_any

        for site, prefix in (
            ("/v/lib/python3.12/site-packages", "/v"),
            ("/usr/lib/python3/dist-packages", "/usr"),
            ("/home/u/.local/lib/python3.11/site-packages", "/home/u/.local"),
            ("/t/target", "/t/target"),
        ):
            with self.subTest(site=site):
                pres = _install_prefixes(site)
                self.assertEqual(pres[-1], prefix)
                self.assertTrue(_under_any(prefix + "/bin/ipybox", pres))
                self.assertFalse(_under_any("/tmp/evil/bin/ipybox", pres))
                self.assertFalse(_under_any(prefix + "x/bin/ipybox", pres))

    def test_version(self):
        import re

        import ipybox

        self.assertRegex(ipybox.__version__, re.compile(r"^\d+\.\d+\.\d+"))
        self.assertIn("__version__", ipybox.__all__)


class IgnoredArgumentsTest(unittest.TestCase):
    def test_each_warns_once_saying_what_replaced_it(self):
        from ipybox import IgnoredArgumentWarning
        from ipybox import code_exec

        code_exec._warned_ignored.clear()
        names = ["tool_server_host", "tool_server_port", "kernel_gateway_host", "kernel_gateway_port"]
        values = {"tool_server_host": "localhost", "tool_server_port": 8900,
                  "kernel_gateway_host": "localhost", "kernel_gateway_port": 8888}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            CodeExecutor(**values)
            CodeExecutor(**values)  # a second executor: no second warning
            CodeExecutor()  # none given: none
        got = [w for w in caught if issubclass(w.category, IgnoredArgumentWarning)]
        self.assertEqual([str(w.message).split("(", 2)[1].split("=")[0] for w in got], names)
        for w in got:
            self.assertIn("is ignored since ipybox 0.10", str(w.message))
            self.assertEqual(w.filename, __file__, "the warning points at the caller's line")
        self.assertIn("unix socket", str(got[0].message))
        self.assertIn("--gateway-url", str(got[2].message))
        self.assertIn("server_url=", str(got[3].message))

    def test_0_9_keywords_are_accepted(self):
        # Every keyword upstream's 0.9 CodeExecutor takes (docs/python.md).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            CodeExecutor(
                kernel_env={"A": "1"}, working_dir=".", images_dir="images", approval_timeout=None,
                connect_timeout=30, kernel_init_timeout=10, sandbox=False, sandbox_config=None,
                log_level="WARNING", approve_tool_calls=True, approve_shell_cmds=False,
                require_shell_escape=False, tool_server_host="localhost", tool_server_port=8900,
                kernel_gateway_host="localhost", kernel_gateway_port=8888,
            )


class UsageErrorTest(unittest.TestCase):
    """ipybox mcp's usage errors in CodeExecutor's terms."""

    def test_flags_become_arguments(self):
        for tail, want in (
            ('ipybox mcp: --mcp-config /tmp/ipybox-mcp-config-1x2y: server "x": unknown field "comand"',
             'mcp_servers: server "x": unknown field "comand"'),
            ("ipybox mcp: --sandbox-config: sandbox config: open /w/nope.json: no such file",
             "sandbox_config: sandbox config: open /w/nope.json: no such file"),
            ('ipybox mcp: ipybox: approval policy: /w/p:2: "alow": a line starts with allow',
             'approval policy: /w/p:2: "alow": a line starts with allow'),
            ("ipybox mcp: --python /opt/py: this Python cannot import ipykernel",
             "python=/opt/py: this Python cannot import ipykernel"),
            ("ipybox mcp: --kernel-env-file /tmp/ipybox-kernel-env-9: line 1: want KEY=VALUE",
             "kernel_env: line 1: want KEY=VALUE"),
            ("ipybox mcp: --pythonic stays", "--pythonic stays"),
        ):
            with self.subTest(tail=tail):
                self.assertEqual(_usage_error(tail), want)
