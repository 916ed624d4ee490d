"""Runs every example of docs/python.md and compares its output with the
text block after it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest

from ._support import REPO, binary, everything, new_workspace

DOC = REPO / "docs" / "python.md"
EXAMPLE = re.compile(r"```python\n(.*?)```\n\n```text\n(.*?)```", re.S)


def examples() -> list[tuple[int, str, str]]:
    text = DOC.read_text()
    return [(text[: m.start()].count("\n") + 1, m.group(1), m.group(2)) for m in EXAMPLE.finditer(text)]


README = REPO / "README.md"


class DocsTest(unittest.TestCase):
    def test_every_python_block_has_its_output(self):
        text = DOC.read_text()
        self.assertEqual(text.count("```python\n"), len(examples()), "a python block without a text block after it")
        self.assertGreaterEqual(len(examples()), 10)

    def test_examples(self):
        bin_path = binary()
        server = everything()["command"]
        env = dict(os.environ)
        env["IPYBOX_BIN"] = bin_path
        env["PATH"] = os.path.dirname(server) + os.pathsep + env.get("PATH", "")
        env["PYTHONPATH"] = str(REPO / "python")
        for line, code, want in examples():
            with self.subTest(line=line):
                cwd = new_workspace()
                (cwd / "example.py").write_text(code)
                p = subprocess.run(
                    [sys.executable, "example.py"], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
                )
                self.assertEqual(p.returncode, 0, f"docs/python.md:{line}: exit {p.returncode}\n{p.stderr}")
                self.assertEqual(p.stdout, want, f"docs/python.md:{line}: stderr:\n{p.stderr}")

    def test_readme(self):
        # The README's example, with the output its comments promise.
        blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
        self.assertEqual(len(blocks), 1)
        code = blocks[0]
        want = "".join(m + "\n" for m in re.findall(r"print\(.*\)\s+# (.*)", code))
        want = want.replace("everything.echo", "approving everything.echo")
        env = dict(os.environ, IPYBOX_BIN=binary(), PYTHONPATH=str(REPO / "python"))
        env["PATH"] = os.path.dirname(everything()["command"]) + os.pathsep + env.get("PATH", "")
        cwd = new_workspace()
        (cwd / "readme.py").write_text(code)
        p = subprocess.run([sys.executable, "readme.py"], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
        self.assertEqual((p.returncode, p.stdout), (0, want), p.stderr)
