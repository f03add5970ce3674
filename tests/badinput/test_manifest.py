"""Bad-input catalogue: manifests with bad lines (docs/bad-inputs.md). Each error names the file and line."""
from __future__ import annotations

import pytest


def _dataset(tmp_path, text, storage_options, bucket=None, raw: bytes | None = None):
    from fluxfs.pipes import FluxMapDataset

    path = tmp_path / "manifest.txt"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text(text)
    base = f"flux://{bucket}/" if bucket else None
    return str(path), FluxMapDataset.from_manifest(str(path), base_url=base, storage_options=storage_options)


def test_manifest_line_with_invalid_json(tmp_path, storage_options, bucket):
    path, ds = _dataset(tmp_path, f'{{"name": "{bucket}/a", "size": 1}}\n{{"name": "{bucket}/b", "size": \n',
                        storage_options)
    with pytest.raises(ValueError, match=rf"{path}, line 2: invalid JSON \(Expecting value at column \d+\)"):
        len(ds)


def test_manifest_line_with_negative_size(tmp_path, storage_options, bucket):
    path, ds = _dataset(tmp_path, f'{{"name": "{bucket}/a", "size": -4}}\n', storage_options)
    with pytest.raises(ValueError, match=rf'{path}, line 1: "size" must be a non-negative integer'):
        len(ds)


def test_manifest_line_with_two_tabs(tmp_path, storage_options, bucket):
    path, ds = _dataset(tmp_path, "# images\ncat.jpg\t1\ndog.jpg\t2\textra\n", storage_options, bucket)
    with pytest.raises(ValueError, match=rf"{path}, line 3: more than one tab \(expected key<TAB>label\)"):
        len(ds)


def test_manifest_key_without_bucket(tmp_path, storage_options):
    path, ds = _dataset(tmp_path, "cat.jpg\t1\n", storage_options)
    with pytest.raises(ValueError, match=rf"{path}, line 1: key has no bucket \(expected bucket/key, or pass base=\)"):
        len(ds)


def test_manifest_that_is_not_utf8(tmp_path, storage_options, bucket):
    path, ds = _dataset(tmp_path, None, storage_options, bucket, raw=b"ok.jpg\t1\n\xff\xfe.jpg\t2\n")
    with pytest.raises(ValueError, match=rf"{path}, line 2: not UTF-8 \(invalid start byte at byte 0\)"):
        len(ds)


def test_manifest_with_no_entries(tmp_path, storage_options, bucket):
    path, ds = _dataset(tmp_path, "# only a comment\n\n", storage_options, bucket)
    with pytest.raises(ValueError, match=f"manifest {path} lists no objects"):
        len(ds)


def test_manifest_line_nested_too_deeply(tmp_path, storage_options, bucket):
    """'[[[[…' 100k deep on a line made json.loads raise RecursionError, naming neither file nor line."""
    deep = "[" * 100_000 + "]" * 100_000
    path, ds = _dataset(tmp_path, f'{{"name": "{bucket}/a", "size": 1}}\n{deep}\n', storage_options)
    with pytest.raises(ValueError, match=rf"{path}, line 2: invalid JSON \(nested too deeply to parse at column 1\)"):
        len(ds)
