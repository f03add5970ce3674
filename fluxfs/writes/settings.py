"""What a write settles before its first byte: the destination, the strategy class for the
``multipart`` option ("xml", "compose", "resumable"), the part size and how many parts go up at once."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..errors import ServerUnreachable
from ..gcs.limits import RESUMABLE_CHUNK_MULTIPLE, XML_MIN_PART_SIZE
from ..zonal import transport
from .appendable_uploader import AppendableUploader
from .compose import ComposeUploader
from .fallback import XmlOrComposeUploader, xml_unsupported
from .resumable import ResumableUploader

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client
    from ..zonal.transport import Transport
    from .fields import ObjectFields
    from .parts import PartWriter
    from .strategy import Uploader

# Part size and concurrency defaults, and how they were measured: fluxfs/options.py.

STRATEGIES: dict[str, Callable[["PartWriter"], "Uploader"]] = {
    "xml": XmlOrComposeUploader, "compose": ComposeUploader, "resumable": ResumableUploader,
}


def upload_settings(client: "Client", block_size: int | None = None,
                    fields: "ObjectFields | None" = None, dest: "Transport | None" = None
                    ) -> tuple[int, int, Callable]:
    """(part size, concurrency, uploader class) of one write, validated.

    The part size is the ``part_size`` option, which must suit the strategy (XML multipart: at least
    5 MiB; ``multipart="resumable"``: a multiple of 256 KiB) and twice it must fit ``write_memory``, or the
    write fails at open, naming it. A
    ``block_size`` given to ``open()`` (gcsfs callers pass 256 KiB) is instead rounded up to what the
    strategy needs: the write succeeds, its memory bound by about concurrency x that part size.
    Fields the XML API's headers cannot carry unchanged (non-ASCII metadata values, upper-case
    metadata keys) send an ``xml`` write through one JSON resumable session instead. A server found
    to lack XML multipart upload (`fallback.py`) gets ``compose`` writes instead, except where the destination's
    transport (`dest`, from `destination`) has no compose (a zonal bucket): one resumable session; over gRPC
    (``zonal_transport="grpc"``) one appendable object there, its parts appended in order (`appendable_uploader.py`).
    """
    if dest is not None and dest.grpc:
        part = int(block_size or client.options.part_size)
        if part < 1:
            raise ValueError(f"{'block_size' if block_size else 'part_size'} must be positive, not {part}")
        return part, 1, AppendableUploader
    option = client.options.multipart
    strategy = "resumable" if option == "xml" and fields is not None and not fields.xml_safe else option
    if strategy == "xml" and xml_unsupported(client):
        strategy = "compose"
    if strategy == "compose" and dest is not None and not dest.compose:
        strategy = "resumable"
    conc = client.options.write_concurrency
    if block_size is None:
        part = int(client.options.part_size)
        if part < 1:
            raise ValueError(f"part_size must be positive, not {part}")
        if option == "xml" and part < XML_MIN_PART_SIZE:
            raise ValueError(f"part_size {part} is below the 5 MiB ({XML_MIN_PART_SIZE}) minimum of XML multipart "
                             "uploads; use a larger part_size or multipart='compose'")
        if option == "resumable" and part % RESUMABLE_CHUNK_MULTIPLE:
            raise ValueError(f"part_size {part} must be a multiple of 256 KiB for resumable uploads "
                             "(multipart='resumable')")
    else:
        part = int(block_size)
        if part < 1:
            raise ValueError(f"block_size must be positive, not {block_size}")
    part = min_part_size(part, strategy)
    if 2 * part > client.options.write_memory:
        raise ValueError(f"parts of {part} bytes do not fit write_memory {client.options.write_memory} twice (one "
                         "uploading, one being filled); raise write_memory or use smaller parts")
    if strategy == "resumable":
        conc = 1  # one resumable session takes its chunks in order
    return part, conc, STRATEGIES[strategy]


async def destination(client: "Client", bucket: str, path: str) -> "Transport":
    """The transport of the write of `path` (`zonal/transport.py`), the bucket's layout asked only where the write
    could differ by it; a server not reached names the object being written, as the write's own requests would."""
    try:
        return await transport.for_write(client, bucket, may_compose(client))
    except ServerUnreachable as exc:
        raise _named(exc, bucket, path) from None


def destination_sync(client: "Client", bucket: str, path: str) -> "Transport":
    """`destination` from blocking code (a handle being opened): a layout already known answers without the event
    loop, else it is asked as there."""
    try:
        return transport.for_write_sync(client, bucket, may_compose(client))
    except ServerUnreachable as exc:
        raise _named(exc, bucket, path) from None


def _named(exc: ServerUnreachable, bucket: str, path: str) -> ServerUnreachable:
    return ServerUnreachable(f"{path}: {str(exc).removeprefix(bucket + ': ')}")


def may_compose(client: "Client") -> bool:
    """Whether a write would compose its parts: only then does the bucket's layout (zonal or not) matter."""
    return client.options.multipart == "compose" or (client.options.multipart == "xml" and xml_unsupported(client))


def min_part_size(part: int, strategy: str) -> int:
    """`part` rounded up to the smallest part size `strategy` accepts."""
    if strategy == "xml":
        return max(part, XML_MIN_PART_SIZE)
    if strategy == "resumable":
        return -(-part // RESUMABLE_CHUNK_MULTIPLE) * RESUMABLE_CHUNK_MULTIPLE
    return part


def object_path(client: "Client", path: str) -> tuple[str, str]:
    """(bucket, key) of a write's destination; refuses a generation or a bare bucket."""
    bucket, key, generation = client.split_path(path)
    if generation:
        raise ValueError(f"cannot write to a specific generation: {path}")
    if not key:
        raise ValueError(f"not an object path (no key after the bucket): {path}")
    return bucket, key
