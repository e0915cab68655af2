"""TLS and bearer tokens end to end: gemm_server with --tls_cert, --tls_key
and --auth_tokens_file (certificates made here with openssl), driven by
gemm_client over TLS with the right token, a wrong one, and none."""

import os
import subprocess
import tempfile
import unittest

import grpc
import numpy as np

import gemm_client
from gemm_client import GemmError

import server_process

SERVER = None
TOKEN = "alice-py-token-0123456789"


def make_certificates(directory):
    """A CA and a server certificate for 127.0.0.1; returns (ca.pem, server.pem, server.key)."""
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", *key, "-days", "1", "-subj", "/CN=gemm py test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
        "keyUsage=critical,keyCertSign", "-keyout", "ca.key", "-out", "ca.pem")
    with open(os.path.join(directory, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("req", *key, "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr")
    run("x509", "-req", "-days", "1", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-extfile", "server.ext")
    return [os.path.join(directory, n) for n in ("ca.pem", "server.pem", "server.key")]


class SecurityTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        ca, cert, key = make_certificates(cls.dir)
        tokens = os.path.join(cls.dir, "tokens")
        with open(tokens, "w") as f:
            f.write(f"alice {TOKEN}\n")
        with open(ca, "rb") as f:
            cls.ca = f.read()
        cls.server = server_process.ServerProcess(
            SERVER, f"--tls_cert={cert}", f"--tls_key={key}", f"--auth_tokens_file={tokens}")
        cls.server.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__()

    def test_tls_with_the_right_token(self):
        a = np.eye(8, dtype=np.float32)
        with gemm_client.Client(self.server.target, tls=True, root_certificates=self.ca,
                                token=TOKEN) as client:
            np.testing.assert_array_equal(client.matmul(a, 2 * a), 2 * a)
            with client.register(a) as a_dev:  # the handle is alice's
                np.testing.assert_array_equal(client.matmul(a_dev, a), a)

    def test_wrong_or_missing_token(self):
        a = np.eye(4, dtype=np.float32)
        for token in ("mallory-py-token-000000000", None):
            with gemm_client.Client(self.server.target, tls=True, root_certificates=self.ca,
                                    token=token) as client:
                with self.assertRaises(GemmError) as e:
                    client.matmul(a, a)
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED, token)

    def test_plaintext_client_is_refused(self):
        with gemm_client.Client(self.server.target, token=TOKEN, timeout=5,
                                retry=gemm_client.RetryPolicy(max_attempts=1)) as client:
            with self.assertRaises(GemmError) as e:
                client.matmul(np.eye(4, dtype=np.float32), np.eye(4, dtype=np.float32))
        self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    SERVER = server_process.server_binary()
    unittest.main()
