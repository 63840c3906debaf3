"""Client commands about what jobs read and write: files, download, datasets, tensorboard."""

from __future__ import annotations

import os
import sys

import click

from models.common import EXIT_OK, EXIT_USAGE
from models.sourcetree import human
from tui.cli.base import client, connection_options, echo_json, job_id_argument, json_option, print_table
from tui.widgets.fmt import as_me


@click.command()
@connection_options
@job_id_argument
@click.argument("path", required=False)
@json_option
def files(job_id, path, as_json) -> int:
    """The files of a job's dir: size, time, path.

    PATH: only the paths starting with it, e.g. checkpoints/."""
    listing = client().files(job_id, path or "")
    if as_json:
        echo_json(listing)
        return EXIT_OK
    rows = [(human(f["size"]), f["modified"][:19].replace("T", " "), f["path"]) for f in listing["files"]]
    print_table((), rows, right=[0])
    click.echo(
        f"{len(listing['files'])} files, {human(listing['total_bytes'])}"
        + (" (truncated)" if listing["truncated"] else "")
    )
    return EXIT_OK


@click.command()
@connection_options
@job_id_argument
@click.argument("path", required=False)
@click.option("-o", "--output", metavar="DEST", help="where to write it (default: its name here)")
def download(job_id, path, output) -> int:
    """A file of a job's dir (default: model.keras), or a folder as a .tar.gz.

    A broken download resumes: the bytes so far wait in DEST.part."""
    api = client()
    path = (path or "model.keras").strip("/")
    listed = api.files(job_id, path)["files"]
    folder = not any(f["path"] == path for f in listed)
    if folder and not any(f["path"].startswith(path + "/") for f in listed):
        click.echo(
            f"gpudeck: job {job_id} has no file or folder {path!r} (gpudeck files {job_id} lists them)", err=True
        )
        return EXIT_USAGE
    dest = output or (f"{os.path.basename(path)}.tar.gz" if folder else os.path.basename(path))
    live = sys.stderr.isatty()

    def progress(done: int, total: int | None) -> None:
        if live:
            of = f" of {human(total)} ({done * 100 // total}%)" if total else ""
            click.echo(f"\r{dest}: {human(done)}{of}", nl=False, err=True)

    size = api.download(job_id, path, dest, archive=folder, progress=progress)
    if live:
        click.echo(err=True)
    click.echo(f"{dest}: {human(size)}" + (f" (the folder {path}/ as a .tar.gz)" if folder else ""))
    return EXIT_OK


@click.group(invoke_without_command=True)
@connection_options
@json_option
@click.pass_context
def datasets(ctx: click.Context, as_json) -> int | None:
    """Uploaded datasets: ls (the default), upload, rm."""
    if ctx.invoked_subcommand is None:
        return ctx.invoke(datasets_ls, as_json=as_json)
    ctx.meta["gpudeck.json"] = as_json
    return None


def _json_here(as_json: bool) -> bool:
    """--json given to this command or to `datasets` before it."""
    return as_json or bool(click.get_current_context().meta.get("gpudeck.json"))


@datasets.command(name="ls")
@connection_options
@click.argument("name", required=False)
@json_option
def datasets_ls(as_json, name=None) -> int:
    """Every dataset's versions (NAME: only that dataset's)."""
    api = client()
    sets = [api.dataset(name)] if name else api.datasets()["datasets"]
    if _json_here(as_json):
        echo_json(sets)
        return EXIT_OK
    rows = [
        (
            v["name"],
            v["version"],
            v["format"],
            v["files"],
            human(v["size_bytes"]),
            f"{v['created_at']}{' (latest)' if v['version'] == ds['latest'] else ''}",
        )
        for ds in sets
        for v in ds["versions"]
    ]
    print_table(("NAME", "VERSION", "FORMAT", "FILES", "SIZE", "CREATED"), rows, right=[3, 4])
    return EXIT_OK


def _name_version(ref: str, command: str, usage: str) -> tuple[str, str] | None:
    name, sep, version = ref.partition(":")
    if not sep or not name or not version:
        click.echo(f"gpudeck datasets {command}: {usage}", err=True)
        return None
    return name, version


@datasets.command(name="upload")
@connection_options
@click.argument("ref", metavar="NAME:VERSION")
@click.argument("file", metavar="FILE")
@json_option
def datasets_upload(ref, file, as_json) -> int:
    """Upload an archive (tar, tar.gz, tgz or zip) as dataset NAME:VERSION."""
    got = _name_version(ref, "upload", "NAME:VERSION FILE (a tar, tar.gz, tgz or zip archive)")
    if got is None:
        return EXIT_USAGE
    if not os.path.isfile(file):
        click.echo(f"gpudeck: {file}: no such file", err=True)
        return EXIT_USAGE
    meta = client().upload_dataset(*got, file)
    if _json_here(as_json):
        echo_json(meta)
    else:
        click.echo(f"uploaded {meta['ref']}: {meta['format']}, {meta['files']} files, {human(meta['size_bytes'])}")
    return EXIT_OK


@datasets.command(name="rm")
@connection_options
@click.argument("ref", metavar="NAME:VERSION")
@json_option
def datasets_rm(ref, as_json) -> int:
    """Delete one version of a dataset (jobs that use it must have ended)."""
    got = _name_version(ref, "rm", "NAME:VERSION (one version; jobs that use it must have ended)")
    if got is None:
        return EXIT_USAGE
    gone = client().delete_dataset(*got)
    if _json_here(as_json):
        echo_json(gone)
    else:
        click.echo(f"deleted {ref} ({human(gone['bytes_freed'])} freed)")
    return EXIT_OK


@click.command()
@connection_options
@click.argument("ids", nargs=-1, type=int, metavar="[ID]...")
@click.option("--stop", type=int, metavar="PORT", help="stop the TensorBoard on PORT")
@json_option
def tensorboard(ids, stop, as_json) -> int:
    """A TensorBoard over jobs: start or reuse one, list, stop.

    With job IDs: start (or reuse) a TensorBoard over them and print how to open it; with none: list the running
    ones."""
    api = client()
    if stop is not None:
        api.stop_tensorboard(stop)
        click.echo(f"stopped the TensorBoard on port {stop}")
        return EXIT_OK
    if not ids:
        boards = api.tensorboards()["tensorboards"]
        if as_json:
            echo_json(boards)
            return EXIT_OK
        for b in boards:
            click.echo(f"{b['url']}  jobs {', '.join(map(str, b['jobs']))}  last used {b['last_used_at']}")
        return EXIT_OK
    board = api.tensorboard(list(ids))
    if as_json:
        echo_json(board)
        return EXIT_OK
    click.echo(f"TensorBoard for jobs {', '.join(map(str, board['jobs']))}: {board['url']}")
    click.echo(f"from your machine: {as_me(board['ssh_tunnel'])}")
    click.echo(f"then open http://localhost:{board['port']}/")
    return EXIT_OK


COMMANDS = (files, download, datasets, tensorboard)
