"""The client's settings, checked once (ValueError naming the field), and the
channels they make. The defaults are the C++ client's (client/gemm_client.h)."""

import dataclasses
import json

import grpc

from gemm_client.retry import RetryPolicy

# Spreads a channel's calls over every address its target resolves to; with
# one address it behaves like gRPC's default pick_first.
_SERVICE_CONFIG = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})


@dataclasses.dataclass
class Settings:
    tls: object = False
    root_certificates: bytes = None
    certificate_chain: bytes = None
    private_key: bytes = None
    token: str = None
    timeout: float = 30.0
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    replica_policy: str = "least_outstanding"
    replica_backoff: float = 1.0
    resolve_interval: float = 30.0
    affinity_header: bool = True
    max_message_bytes: int = (1 << 30) + (16 << 20)
    chunked_threshold_bytes: int = 4 << 20
    # A chunked request's Gemm is sent while its operands are still
    # uploading, with Matrix.release_after_use on them (pipelined requests,
    # docs/api.md): the server holds it until the uploads complete and
    # releases the operands when it ends, so neither a wait for the uploads
    # nor ReleaseMatrix calls stand between the request and its answer. A
    # server that does not wait (FAILED_PRECONDITION: unfinished) gets the
    # Gemm again once the uploads are done. False: upload, then Gemm, then
    # release, one after another.
    pipelined_uploads: bool = True
    # With a server on this host (loopback or a Unix socket, one replica),
    # operands given by bytes are copied into a shared-memory region the
    # client registers itself and D is written there (then copied out), so
    # no matrix bytes cross gRPC (shared_memory.py). Where the server
    # refuses the region (another host: PERMISSION_DENIED; shared memory off:
    # FAILED_PRECONDITION; over its limits: RESOURCE_EXHAUSTED) the client
    # sends bytes from then on and logs it once.
    shared_memory: bool = False
    chunk_bytes: int = 1 << 20
    transfer_channels: int = 8
    max_reconnect_backoff: float = 2.0
    wait_for_ready: bool = False
    channel_options: tuple = ()

    def validate(self):
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise ValueError(f"timeout: must be a positive number of seconds, got {self.timeout!r}")
        if not isinstance(self.retry, RetryPolicy):
            raise ValueError("retry: must be a gemm_client.RetryPolicy")
        self.retry.validate()
        if not (isinstance(self.max_message_bytes, int) and 0 < self.max_message_bytes < 1 << 31):
            raise ValueError(f"max_message_bytes: must be in [1, 2^31), got "
                             f"{self.max_message_bytes!r}")
        if not (isinstance(self.chunk_bytes, int) and
                0 < self.chunk_bytes <= self.max_message_bytes - 4096):
            raise ValueError(f"chunk_bytes: must be in [1, max_message_bytes - 4096], got "
                             f"{self.chunk_bytes!r}")
        if not (isinstance(self.chunked_threshold_bytes, int) and
                self.chunked_threshold_bytes >= 0):
            raise ValueError("chunked_threshold_bytes: must be an int >= 0 (0 = only when a "
                             "request would not fit in one message)")
        if not (isinstance(self.transfer_channels, int) and 1 <= self.transfer_channels <= 64):
            raise ValueError(f"transfer_channels: must be in [1, 64], got "
                             f"{self.transfer_channels!r}")
        if not isinstance(self.pipelined_uploads, bool):
            raise ValueError(f"pipelined_uploads: must be True or False, got "
                             f"{self.pipelined_uploads!r}")
        if not isinstance(self.shared_memory, bool):
            raise ValueError(f"shared_memory: must be True or False, got "
                             f"{self.shared_memory!r}")
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ValueError("certificate_chain and private_key go together")
        if not self.tls and (self.root_certificates or self.certificate_chain):
            raise ValueError("tls: certificates are given but tls is False")
        if self.token is not None and (
                not self.token or any(not 0x21 <= ord(ch) <= 0x7E for ch in self.token)):
            raise ValueError("token: must be printable ASCII without spaces")
        if not self.max_reconnect_backoff > 0:
            raise ValueError("max_reconnect_backoff: must be positive")

    def credentials(self):
        """Channel credentials, or None for plaintext."""
        if isinstance(self.tls, grpc.ChannelCredentials):
            return self.tls
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates, private_key=self.private_key,
            certificate_chain=self.certificate_chain)

    def channel_args(self, transfer_index=None, dns=None):
        """gRPC channel arguments: for a replica's main channel (transfer_index
        None) or its transfer channel number `transfer_index`; `dns` is the
        (name, port) a replica address came from (its TLS name and authority)."""
        backoff_ms = int(self.max_reconnect_backoff * 1000)
        args = [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.service_config", _SERVICE_CONFIG),
            ("grpc.max_reconnect_backoff_ms", backoff_ms),
            ("grpc.initial_reconnect_backoff_ms", min(1000, backoff_ms)),
        ]
        # The server binds each connection to one caller, so a client with a
        # token keeps connections of its own.
        if self.token or transfer_index is not None:
            args.append(("grpc.use_local_subchannel_pool", 1))
        if transfer_index is not None:
            args.append(("gemm.transfer_channel", transfer_index))
        if dns is not None:
            args.append(("grpc.default_authority", f"{dns[0]}:{dns[1]}"))
            if self.tls:
                args.append(("grpc.ssl_target_name_override", dns[0]))
        return args + list(self.channel_options)

    def metadata(self, affinity_key=""):
        md = []
        if self.token:
            md.append(("authorization", "Bearer " + self.token))
        if self.affinity_header and affinity_key:
            md.append(("gemm-affinity", affinity_key))
        return tuple(md)
