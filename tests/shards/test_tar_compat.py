"""Crafted tars (pax size/path records, global headers, GNU long names and links, unknown types, odd names):
fluxfs's members, samples and indexes equal what `tarfile` reads, or the shard is refused, named."""
from __future__ import annotations

import tarfile
import warnings

import pytest

from fluxfs.pipes.shards import FluxShardDataset, FluxShardMapDataset, MissingIndexWarning, ShardError
from fluxfs.pipes.shards.indexer import build_index, write_index
from fluxfs.pipes.shards.tarformat import Member, scan
from tests.conftest import make_fs

from .crafted import data_blocks, end, extended, header, pax, reference

BIG = bytes(range(256)) * 3  # 768 bytes: more than the ustar size fields below claim


def _pax_size() -> bytes:
    # As tarfile writes a member of 8 GiB or more: the size in a pax record, the ustar field 0 (or anything).
    return (header("a/0001.bin", 0, pax={"size": str(len(BIG))}) + data_blocks(BIG)
            + header("a/0001.cls", 1) + data_blocks(b"3")
            + header("a/0002.bin", 100, pax={"size": "5"}) + data_blocks(b"hello")
            + header("a/0002.cls", 1) + data_blocks(b"4") + end())


CRAFTED = {
    "pax-size": _pax_size,
    "pax-path-and-size": lambda: (header("short.bin", 2, pax={"path": "k/" + "p" * 120 + ".bin", "size": "700"})
                                  + data_blocks(BIG[:700]) + header("z.txt", 2) + data_blocks(b"zz") + end()),
    "global-header-then-x": lambda: (extended(tarfile.XGLTYPE, pax(comment="made by hand", mtime="5"))
                                     + extended(tarfile.XHDTYPE, pax(path="g/1.txt"))
                                     + header("ignored", 3) + data_blocks(b"one") + end()),
    "long-name-then-pax": lambda: (extended(tarfile.GNUTYPE_LONGNAME, b"from-L.txt\0")
                                   + extended(tarfile.XHDTYPE, pax(path="from-x.txt"))
                                   + header("ustar.txt", 2) + data_blocks(b"ab") + end()),
    "pax-then-long-name": lambda: (extended(tarfile.XHDTYPE, pax(path="from-x.txt"))
                                   + extended(tarfile.GNUTYPE_LONGNAME, b"from-L.txt\0")
                                   + header("ustar.txt", 2) + data_blocks(b"ab") + end()),
    "long-name-nul-inside": lambda: (extended(tarfile.GNUTYPE_LONGNAME, b"cut.txt\0after the nul\0")
                                     + header("x", 1) + data_blocks(b"c") + end()),
    "gnu-long-link": lambda: (header("l", 0, fmt=tarfile.GNU_FORMAT, type=tarfile.SYMTYPE, linkname="t" * 300)
                              + header("after.txt", 4, fmt=tarfile.GNU_FORMAT) + data_blocks(b"four") + end()),
    "pax-linkpath": lambda: (header("l", 0, pax={"linkpath": "t" * 300}, type=tarfile.SYMTYPE)
                             + header("after.txt", 4) + data_blocks(b"four") + end()),
    "unknown-type": lambda: (header("v/1.dat", 600, type=b"Z") + data_blocks(BIG[:600])
                             + header("v/1.txt", 2) + data_blocks(b"ok") + end()),
    "directory-and-fifo": lambda: (header("d", 0, type=tarfile.DIRTYPE) + header("f", 0, type=tarfile.FIFOTYPE)
                                   + header("d/1.txt", 2) + data_blocks(b"ok") + end()),
    "non-utf8-ustar-name": lambda: (header("k/\udcff\udcfe.txt", 2, fmt=tarfile.GNU_FORMAT)
                                    + data_blocks(b"ok") + end()),
    "pax-trailing-slash": lambda: (header("s.txt", 2, pax={"path": "slash.txt//"}) + data_blocks(b"ok") + end()),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_scan_reads_what_tarfile_reads(name):
    data = CRAFTED[name]()
    want = reference(data)
    assert want, "the reference reads no member: the crafted archive is wrong"
    got = scan(f"{name}.tar", data)
    assert got == [m for m, _ in want]
    assert [data[m.offset:m.end] for m in got] == [d for _, d in want]


def test_pax_size_samples_and_index_match_tarfile_in_every_reader(flux_server, bucket):
    fs = make_fs(flux_server)
    data = _pax_size()
    fs.pipe_file(f"{bucket}/p/0.tar", data)
    url = f"flux://{bucket}/p/0.tar"
    want = {}
    for m, d in reference(data):
        key, ext = m.name.split(".")
        want.setdefault(key, {})[ext] = d
    assert build_index(fs, url).members == [m for m, _ in reference(data)]
    so = {"endpoint_url": flux_server.url, "token": "anon", "skip_instance_cache": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingIndexWarning)
        streamed = list(FluxShardDataset.from_shards(url, storage_options=so))
    write_index(fs, build_index(fs, url))
    indexed = list(FluxShardDataset.from_shards(url, storage_options=so))
    mapped = FluxShardMapDataset(url, storage_options=so)
    for got in (streamed, indexed, [mapped[i] for i in range(len(mapped))]):
        assert {s["__key__"]: {k: v for k, v in s.items() if not k.startswith("__")} for s in got} == want
    assert len(streamed) == len(indexed) == len(mapped) == 2


def test_webdataset_agrees_on_a_pax_size_member(tmp_path):
    wds = pytest.importorskip("webdataset")
    path = tmp_path / "p.tar"
    path.write_bytes(_pax_size())
    got = [{k: v for k, v in s.items() if not k.startswith("__")}
           for s in wds.WebDataset(str(path), shardshuffle=False)]
    assert got == [{"bin": BIG, "cls": b"3"}, {"bin": b"hello", "cls": b"4"}]


@pytest.mark.parametrize("bad, message", [
    (header("a.bin", 0, pax={"size": "12x"}) + end(), r"pax size record '12x' is not a byte count"),
    (extended(tarfile.XGLTYPE, pax(size="10")) + header("a.bin", 0) + end(), r"global pax header sets 'size'"),
    (header("a.bin", 10, pax={"GNU.sparse.map": "0,10"}) + data_blocks(b"x" * 10) + end(),
     r"GNU sparse member: sparse files are not supported"),
    (extended(tarfile.XHDTYPE, b"99 path=x\n") + header("a", 0) + end(), r"malformed pax header"),
    (extended(tarfile.XHDTYPE, pax(path="x")) + end(), r"an extended header is not followed by a member"),
    (b"\0" * 100, r"truncated header"),  # tarfile.open: ReadError("truncated header"), not an empty archive
])
def test_pax_records_tarfile_would_misread_are_refused_naming_the_shard(bad, message):
    with pytest.raises(ShardError, match=rf"^b/bad\.tar at byte \d+: .*{message}"):
        scan("b/bad.tar", bad)


def test_our_writers_header_for_an_8_gib_member_scans_to_its_size():
    from fluxfs.pipes.shards.tarformat import TarScanner
    from fluxfs.pipes.shards.tarformat import member_header

    size = 8 * 2**30 + 5  # past the ustar size field: tarfile writes it as a pax record
    head = member_header("big/0001.bin", size)
    scanner = TarScanner("big.tar")
    assert scanner.feed(head) == [Member("big/0001.bin", len(head), size)]
    assert scanner.wanted == len(head) + size + (-size % 512)  # the next header, past the data
