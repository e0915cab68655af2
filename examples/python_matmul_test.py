"""Runs examples/python_matmul.py against the real gemm_server (CPU backend)
on loopback and checks that it exits 0 and prints OK; and that the README's
Python example is the example's lines between its "[readme-example-begin]"
and "[readme-example-end]" markers, less their indentation.

Usage (from examples/BUILD): <gemm_server> <python_matmul.py> <README.md>"""

import re
import subprocess
import sys
import unittest

import server_process

SERVER = EXAMPLE = README = None


def marked_lines(path):
    with open(path) as f:
        text = f.read()
    block = text.split("[readme-example-begin]\n", 1)[1].split("[readme-example-end]", 1)[0]
    lines = block.rsplit("\n", 1)[0].split("\n")  # less the end marker's line
    indent = min(len(l) - len(l.lstrip()) for l in lines if l.strip())
    return [l[indent:] for l in lines]


def readme_python_block(path):
    with open(path) as f:
        m = re.search(r"^```python\n(.*?)^```$", f.read(), re.S | re.M)
    return m.group(1).rstrip().split("\n") if m else None


class PythonExampleTest(unittest.TestCase):

    def test_runs_against_a_server(self):
        with server_process.ServerProcess(SERVER) as server:
            run = subprocess.run([sys.executable, EXAMPLE, f"--target={server.target}"],
                                 capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertRegex(run.stdout, r": OK\n$")

    def test_readme_quotes_the_example(self):
        self.assertEqual(readme_python_block(README), marked_lines(EXAMPLE))


if __name__ == "__main__":
    SERVER = server_process.server_binary()
    EXAMPLE, README = sys.argv.pop(1), sys.argv.pop(1)
    unittest.main()
