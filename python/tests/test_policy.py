"""Approval policies through the Python API: rules decide before an
ApprovalRequest is made, each request says why it is asked, and answers
are remembered for the session or always (upstream's accept() and reject()
with keyword arguments of ours)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutor

from ._support import LoopTestCase, binary, shared_workspace


class PolicyTest(LoopTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        # Outside the workspace: ipybox refuses a policy that kernel code
        # could write.
        cls.dir = Path(tempfile.mkdtemp(prefix="ipybox-pytest-policy-"))
        cls.policy = cls.dir / "approvals.policy"
        cls.policy.write_text("allow shell echo allowed\ndeny shell rm *\n")
        cls.ex = CodeExecutor(
            binary=binary(),
            working_dir=shared_workspace(),
            approve_shell_cmds=True,
            approval_policy=cls.policy,
            approval_log=cls.dir / "approvals.jsonl",
            kernel_init_timeout=90,
        )
        cls.run_async(cls.ex.start())

    @classmethod
    def tearDownClass(cls) -> None:
        cls.run_async(cls.ex.stop())
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def stream(self, code, decide):
        async def go():
            items = []
            async for item in self.ex.stream(code):
                items.append(item)
                if isinstance(item, ApprovalRequest):
                    await decide(item)
            return items

        return self.run_async(go())

    def asked(self, code, decide):
        return [i for i in self.stream(code, decide) if isinstance(i, ApprovalRequest)]

    async def never(self, req):
        self.fail(f"asked about {req}: {req.why}")

    def test_rules_decide_first(self):
        self.assertEqual(self.asked("!echo allowed", self.never), [])
        with self.assertRaises(CodeExecutionError) as cm:
            self.stream("!rm -rf /nonexistent-ipybox-pytest", self.never)
        self.assertEqual(cm.exception.name, "ApprovalRejectedError")
        self.assertIn("deny shell rm *", str(cm.exception))

    def test_remembered_for_the_session(self):
        async def session(req):
            self.assertEqual(req.why, "no rule matched")
            self.assertEqual(req.rule, "shell echo s1")
            self.assertIn(("accept", "session"), req.remember)
            await req.accept(remember="session")

        self.assertEqual(len(self.asked("!echo s1", session)), 1)
        self.assertEqual(self.asked("!echo s1", self.never), [])
        self.assertNotIn("s1", self.policy.read_text())

    def test_remembered_always_and_widened(self):
        async def always(req):
            await req.accept(remember="always", rule="shell echo wide *")

        self.assertEqual(len(self.asked("!echo wide 1", always)), 1)
        self.assertEqual(self.asked("!echo wide 2 3", self.never), [])
        self.assertIn("allow shell echo wide *", self.policy.read_text())

        async def refuse(req):
            await req.reject(remember="always")

        with self.assertRaises(CodeExecutionError):
            self.stream("!echo refused", refuse)
        with self.assertRaises(CodeExecutionError):
            self.stream("!echo refused", self.never)
        self.assertIn("deny shell echo refused", self.policy.read_text())

    def test_what_cannot_be_remembered(self):
        async def answer(req):
            self.assertIsNone(req.rule)  # $(...) is known only when it runs
            with self.assertRaises(ValueError):
                await req.accept(remember="session")
            await req.accept()

        self.assertEqual(len(self.asked("!printf %s $(echo x)", answer)), 1)


class PolicyArgvTest(LoopTestCase):
    def test_flags(self):
        files: list[str] = []
        argv = CodeExecutor(working_dir="/tmp", approval_policy="p.policy", approval_log="none")._argv("/bin/ipybox", files)
        self.assertEqual(argv[argv.index("--approval-policy") + 1], str(Path("p.policy").resolve()))
        self.assertEqual(argv[argv.index("--approval-log") + 1], "none")
        argv = CodeExecutor(working_dir="/tmp")._argv("/bin/ipybox", files)
        self.assertNotIn("--approval-policy", argv)
