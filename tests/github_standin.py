"""The part of a local stand-in for GitHub's REST API that every test of a GitHub-talking script
shares: a server on 127.0.0.1 with a queue of faults answered first (one per request) or one answered
to every request, and a handler that answers JSON quietly. Each test adds its own routes; the
releases API (``cuw upload``'s) is here whole: :class:`Releases`."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, quote, unquote, urlsplit

Fault = tuple[int, dict, Any]  # (status, headers, JSON body)


class StandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.faults: list[Fault] = []  # answered first, one per request
        self.forever: Optional[Fault] = None  # answered to every request

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *_args) -> None:
        pass

    def answer(self, code: int, payload: Any, headers: Optional[dict] = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(code)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(raw)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)


# -- the releases API of one repository, with its uploads and downloads ----------------------------


class Releases(StandIn):
    """GitHub's releases API for ``repo``, served at one address for the API (``$GITHUB_API_URL``),
    the uploads (each release's ``upload_url``) and the downloads (``$GITHUB_SERVER_URL``: the
    assets' ``browser_download_url``, where an index's pages link them).

    What GitHub does and the tests need: an asset name exists once per release (an upload of a
    present name answers 422); asset lists come in pages of ``page_size`` with a ``Link`` header;
    ``digests`` says whether assets report their ``digest`` ("sha256:…", newer servers) or not.
    Faults: ``fail_after`` uploads completed, every next upload fails, by ``fail_how``: ``"500"``
    (read, then answered 500, nothing kept), ``"drop"`` (half read, then the connection closed,
    the asset left in state ``new`` as GitHub leaves a cut-off upload) or ``"lost"`` (stored whole,
    then the connection closed before the answer); ``hide_once``: names the next listing leaves
    out (another run uploading meanwhile); and the base's ``faults`` / ``forever``."""

    def __init__(self, repo: str, token: str = "t0ken", page_size: int = 2, digests: bool = True) -> None:
        super().__init__(ReleasesHandler)
        self.repo, self.token, self.page_size, self.digests = repo, token, page_size, digests
        self.releases: dict[str, dict] = {}  # tag -> release
        self.assets: dict[int, dict] = {}  # id -> asset (with its release's id in "release")
        self.data: dict[int, bytes] = {}
        self.next_id = 1
        self.completed: list[str] = []  # "tag/name" of every upload stored whole
        self.deleted: list[tuple[str, str]] = []  # ("tag/name", its state) of every asset deleted
        self.requests: list[tuple[str, str]] = []  # (method, path with its query)
        self.fail_after: Optional[int] = None
        self.fail_how = "500"
        self.hide_once: set[str] = set()
        self.lock = threading.Lock()

    def add_release(self, tag: str) -> dict:
        rid = self._id()
        self.releases[tag] = {
            "id": rid,
            "tag_name": tag,
            "name": tag,
            "upload_url": f"{self.url}/uploads/repos/{self.repo}/releases/{rid}/assets{{?name,label}}",
        }
        return self.releases[tag]

    def add_asset(self, tag: str, name: str, data: bytes, state: str = "uploaded") -> dict:
        release = self.releases.get(tag) or self.add_release(tag)
        aid = self._id()
        self.assets[aid] = {
            "id": aid,
            "name": name,
            "size": len(data),
            "state": state,
            "release": release["id"],
            "browser_download_url": f"{self.url}/{self.repo}/releases/download/{tag}/{quote(name)}",
            "url": f"{self.url}/repos/{self.repo}/releases/assets/{aid}",
        }
        self.data[aid] = data
        return self.assets[aid]

    def held(self, tag: str) -> dict[str, bytes]:
        """name -> bytes of every asset of the release ``tag`` (any state)."""
        rid = self.releases[tag]["id"] if tag in self.releases else None
        return {a["name"]: self.data[i] for i, a in self.assets.items() if a["release"] == rid}

    def shown(self, asset: dict) -> dict:
        out = {k: v for k, v in asset.items() if k != "release"}
        if self.digests:
            out["digest"] = "sha256:" + hashlib.sha256(self.data[asset["id"]]).hexdigest()
        return out

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id


class ReleasesHandler(JsonHandler):
    server: Releases
    protocol_version = "HTTP/1.1"

    def _route(self, method: str) -> None:
        s = self.server
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        with s.lock:
            s.requests.append((method, self.path))
            fault = s.faults.pop(0) if s.faults else s.forever
        if fault is not None:
            self._drain()
            return self.answer(*fault[::2], fault[1])
        api = f"/repos/{s.repo}/releases"
        download = f"/{s.repo}/releases/download/"
        if path.startswith(download):
            return self._download(unquote(path[len(download) :]))
        if self.headers.get("Authorization") != f"Bearer {s.token}":
            self._drain()
            return self.answer(401, {"message": "Bad credentials"})
        if method == "GET" and path.startswith(f"{api}/tags/"):
            release = s.releases.get(unquote(path[len(f"{api}/tags/") :]))
            return self.answer(200, release) if release else self.answer(404, {"message": "Not Found"})
        if method == "POST" and path == api:
            body = json.loads(self._drain())
            if body["tag_name"] in s.releases:
                return self.answer(422, {"message": "Validation Failed", "errors": [{"code": "already_exists"}]})
            return self.answer(201, s.add_release(body["tag_name"]) | {"name": body["name"]})
        if method == "GET" and path.startswith(api) and path.endswith("/assets"):
            return self._list(int(path[len(api) + 1 : -len("/assets")]), query)
        if path.startswith(f"{api}/assets/"):
            return self._asset(method, int(path[len(f"{api}/assets/") :]))
        if method == "POST" and path.startswith(f"/uploads{api}/"):
            return self._upload(int(path[len(f"/uploads{api}/") : -len("/assets")]), query["name"][0])
        self._drain()
        self.answer(404, {"message": "Not Found"})

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")

    def _drain(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _list(self, rid: int, query: dict) -> None:
        s = self.server
        size = min(int(query.get("per_page", ["30"])[0]), s.page_size)
        page = int(query.get("page", ["1"])[0])
        with s.lock:
            hidden, s.hide_once = s.hide_once, set()
            items = [s.shown(a) for a in s.assets.values() if a["release"] == rid and a["name"] not in hidden]
        chunk = items[(page - 1) * size : page * size]
        more = {"Link": f'<{s.url}{urlsplit(self.path).path}?per_page={size}&page={page + 1}>; rel="next"'}
        self.answer(200, chunk, more if page * size < len(items) else None)

    def _asset(self, method: str, aid: int) -> None:
        s = self.server
        asset = s.assets.get(aid)
        if asset is None:
            return self.answer(404, {"message": "Not Found"})
        if method == "DELETE":
            with s.lock:
                tag = next(t for t, r in s.releases.items() if r["id"] == asset["release"])
                s.deleted.append((f"{tag}/{asset['name']}", asset["state"]))
                del s.assets[aid], s.data[aid]
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if self.headers.get("Accept") == "application/octet-stream":  # the bytes: a redirect to the storage
            self.send_response(302)
            self.send_header("Location", asset["browser_download_url"])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return self.answer(200, s.shown(asset))

    def _download(self, rest: str) -> None:
        s = self.server
        tag, _, name = rest.partition("/")
        rid = s.releases[tag]["id"] if tag in s.releases else None
        found = [i for i, a in s.assets.items() if a["release"] == rid and a["name"] == name and a["state"] == "uploaded"]
        if not found:
            return self.answer(404, {"message": "Not Found"})
        data = s.data[found[0]]
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _upload(self, rid: int, name: str) -> None:
        s = self.server
        tag = next(t for t, r in s.releases.items() if r["id"] == rid)
        length = int(self.headers["Content-Length"])
        with s.lock:
            failing = s.fail_after is not None and len(s.completed) >= s.fail_after
            taken = any(a["release"] == rid and a["name"] == name for a in s.assets.values())
        if failing and s.fail_how == "drop":
            data = self.rfile.read(length // 2)
            with s.lock:
                s.add_asset(tag, name, data, state="new")
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        data = self.rfile.read(length)
        if taken:
            return self.answer(
                422, {"message": "Validation Failed", "errors": [{"resource": "ReleaseAsset", "code": "already_exists"}]}
            )
        if failing and s.fail_how == "500":
            return self.answer(500, {"message": "Server Error"})
        with s.lock:
            asset = s.add_asset(tag, name, data)
            s.completed.append(f"{tag}/{name}")
        if failing and s.fail_how == "lost":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        return self.answer(201, s.shown(asset))
