"""GitHub publication through the forge: the new wheels and their records as release assets
(``cuw upload``), and the first publish's check of the Pages site (``cuw publish --first``).

``cuw publish SITE --asset-url TEMPLATE --upload DIR`` leaves the new files in ``DIR`` and lists
each wheel in the site's marker with its asset URL, ``{server}/{repo}/releases/download/{tag}/{wheel}``.
:func:`upload` moves them, idempotently, so that a run that died after any of its uploads is
finished by the next:

* every file of ``DIR`` belongs to a wheel the marker lists (the wheel itself, or a file named
  after it: its ``.build.json``, a ``.metadata``), and goes to the release its wheel's URL names;
* the release is created when absent; its assets are listed (every page);
* an absent asset is uploaded; a present one with the same sha256 is skipped; a present one with
  other bytes stops the run, named (an asset is never replaced); one GitHub lists as not
  ``uploaded`` (an upload cut off in the middle: no bytes are served) is deleted and uploaded again.
  Same bytes: the asset's ``digest`` (``sha256:…``, reported by newer GitHub servers); without
  one, a size that differs is other bytes, an equal size is downloaded and hashed;
* then a verification pass lists the releases again: every asset the marker lists (the earlier
  wheels too) is there, uploaded, of the listed size and, where GitHub reports a digest, of the
  listed sha256, and every file of ``DIR`` is there as it is here. Anything else exits 1, so the
  Pages deploy that follows in ``pages.yml`` does not run.

Every request honours GitHub's rate limits (HTTP 429, or 403 with ``x-ratelimit-remaining: 0`` or
"rate limit" in its message: the wait ``Retry-After`` or ``x-ratelimit-reset`` names, else a
minute), within :data:`RATE_WAIT_MAX_S` for the whole run, and retries a 5xx answer or a dropped
connection :data:`TRIES` times in all. The API is ``$GITHUB_API_URL``, the server
``$GITHUB_SERVER_URL`` (as Actions sets them; the tests point them at a stand-in on 127.0.0.1).
"""

from __future__ import annotations

import email.utils
import hashlib
import http.client
import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union
from urllib.parse import quote, unquote

from cuw.base.errors import CuwError, GateFailure, InputError
from cuw.base.files import sha256_of
from cuw.wheel.index import MARKER, RECORD_SUFFIX, marker_lists, published_files, remote_files

Say = Callable[[str], None]

TRIES = 4  # tries of one request that meets a 5xx answer or a dropped connection
BACKOFF_S = 2.0  # the wait before the second try, doubled before each next
RATE_WAIT_MAX_S = 900.0  # the most one run waits for GitHub's rate limits, all waits together
TIMEOUT_S = 60.0  # the longest wait for GitHub's next bytes
UPLOAD_TIMEOUT_S = 600.0  # the same for an upload's answer (GitHub stores the asset before it answers)
BLOCK = 1 << 20
_sleep = time.sleep  # every wait of this module (the tests count them instead)
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')


@dataclass(frozen=True)
class Endpoint:
    """Where GitHub is and who asks: ``api`` ($GITHUB_API_URL), ``server`` ($GITHUB_SERVER_URL: the
    release downloads' host), ``repo`` (OWNER/NAME), ``token`` ($GH_TOKEN or $GITHUB_TOKEN)."""

    api: str
    server: str
    repo: str
    token: str

    def check(self) -> "Endpoint":
        if not _REPO.match(self.repo):
            raise InputError(f"upload: --repo {self.repo!r}: give OWNER/NAME (default: $GITHUB_REPOSITORY, set on Actions)")
        if not self.token:
            raise InputError("upload: no token: set GH_TOKEN (or GITHUB_TOKEN) to a token with contents: write")
        for name, url in (("GITHUB_API_URL", self.api), ("GITHUB_SERVER_URL", self.server)):
            if not url.lower().startswith(("https://", "http://")):
                raise InputError(f"upload: ${name} {url!r}: an http(s) URL (default: GitHub's)")
        return Endpoint(self.api.rstrip("/"), self.server.rstrip("/"), self.repo, self.token)


@dataclass(frozen=True)
class Answer:
    status: int  # 0: no answer (the connection failed)
    headers: dict[str, str]  # names in lower case
    body: bytes
    error: str = ""  # why there was no answer

    def json(self, what: str) -> Any:
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise CuwError(f"upload: {what}: GitHub answered HTTP {self.status} with no JSON") from None

    def message(self) -> str:
        try:
            data = json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return self.error or self.body[:200].decode("utf-8", "replace")
        text = str(data.get("message", "")) if isinstance(data, dict) else ""
        codes = [e.get("code") for e in data.get("errors", []) if isinstance(e, dict)] if isinstance(data, dict) else []
        return text + (f" ({', '.join(map(str, codes))})" if codes else "")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:  # an answer's redirect is the caller's
        return None


class GitHub:
    """The releases API of one repository, each request bounded, retried and rate-limit aware."""

    def __init__(self, endpoint: Endpoint, say: Say) -> None:
        self.endpoint = endpoint.check()
        self.say = say
        self.waited = 0.0  # seconds spent waiting for rate limits
        self._plain = urllib.request.build_opener(_NoRedirect)

    @property
    def _repo_api(self) -> str:
        return f"{self.endpoint.api}/repos/{self.endpoint.repo}"

    def _send(self, method: str, url: str, body: Union[bytes, Path, None], headers: dict[str, str], timeout: float) -> Answer:
        heads = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "cuda-wheels-forge",
            **headers,
        }
        fh = open(body, "rb") if isinstance(body, Path) else None
        try:
            if isinstance(body, Path):
                heads |= {"Content-Type": "application/octet-stream", "Content-Length": str(body.stat().st_size)}
            elif body is not None:
                heads |= {"Content-Type": "application/json"}
            data: Any = fh if fh is not None else body  # a file is sent in blocks, never read whole
            request = urllib.request.Request(url, data=data, method=method, headers=heads)
            request.add_unredirected_header("Authorization", f"Bearer {self.endpoint.token}")
            with self._plain.open(request, timeout=timeout) as response:
                return Answer(response.status, {k.lower(): v for k, v in response.headers.items()}, response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return Answer(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())
        except (OSError, http.client.HTTPException) as exc:  # a refused or dropped connection, a timeout
            return Answer(0, {}, b"", str(getattr(exc, "reason", None) or exc or type(exc).__name__))
        finally:
            if fh is not None:
                fh.close()

    def _rate_wait(self, answer: Answer) -> Optional[float]:
        """The seconds to wait when ``answer`` is a rate limit, else None."""
        limited = answer.status == 429 or (
            answer.status == 403
            and (
                answer.headers.get("x-ratelimit-remaining") == "0"
                or "rate limit" in answer.body.decode("utf-8", "replace").lower()
            )
        )
        if not limited:
            return None
        after, reset = answer.headers.get("retry-after", ""), answer.headers.get("x-ratelimit-reset", "")
        if after.strip().isdigit():
            return float(after)
        if after:
            try:
                return max(0.0, email.utils.parsedate_to_datetime(after).timestamp() - time.time())
            except (TypeError, ValueError):
                pass  # neither seconds nor a date: the reset header, else a minute
        if reset.strip().isdigit():
            return max(0.0, float(reset) - time.time()) + 1.0
        return 60.0  # GitHub: without either header, wait at least a minute

    def call(
        self,
        method: str,
        url: str,
        body: Union[bytes, Path, None] = None,
        headers: Optional[dict[str, str]] = None,
        retry: bool = True,
    ) -> Answer:
        """One request: rate limits waited out (within the run's bound), a 5xx answer or a dropped
        connection tried again up to :data:`TRIES` times (``retry``; an upload's caller looks first)."""
        timeout = UPLOAD_TIMEOUT_S if isinstance(body, Path) else TIMEOUT_S
        tries = 0
        while True:
            answer = self._send(method, url, body, headers or {}, timeout)
            wait = self._rate_wait(answer)
            if wait is not None:
                if self.waited + wait > RATE_WAIT_MAX_S:
                    lifts = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + wait))
                    raise CuwError(
                        f"upload: GitHub's rate limit: {method} {url} answers HTTP {answer.status} ({answer.message()}); "
                        f"it lifts in {wait:.0f} s (at {lifts}), past the {RATE_WAIT_MAX_S:g} s a run waits: "
                        "run it again then (a rerun uploads only what is missing)"
                    )
                self.say(f"upload: rate limited (HTTP {answer.status}); waiting {wait:.0f} s")
                self.waited += wait
                _sleep(wait)
                continue
            transient = answer.status == 0 or answer.status >= 500
            tries += 1
            if not transient or not retry or tries >= TRIES:
                return answer
            pause = BACKOFF_S * 2 ** (tries - 1)
            self.say(f"upload: {method} {url}: {answer.error or f'HTTP {answer.status}'}; trying again in {pause:g} s")
            _sleep(pause)

    def _ok(self, answer: Answer, method: str, url: str, *expected: int) -> Answer:
        if answer.status not in expected:
            said = answer.error if answer.status == 0 else f"HTTP {answer.status} {answer.message()}"
            fix = (
                "the token needs contents: write on the repository"
                if answer.status in (401, 403, 404)
                else "run it again (a rerun uploads only what is missing)"
            )
            raise CuwError(f"upload: {method} {url}: {said}; {fix}")
        return answer

    def release(self, tag: str, title: str, create: bool) -> Optional[dict[str, Any]]:
        """The release ``tag``; created when absent and ``create``, else None."""
        url = f"{self._repo_api}/releases/tags/{quote(tag, safe='')}"
        found = self._ok(self.call("GET", url), "GET", url, 200, 404)
        if found.status == 200:
            return _release(found.json(url), url)
        if not create:
            return None
        new = f"{self._repo_api}/releases"
        notes = f"Wheels of {title}, published by cuda-wheels-forge; install from the index at the Pages site."
        body = json.dumps({"tag_name": tag, "name": f"{title} wheels", "body": notes, "make_latest": "false"}).encode()
        made = self._ok(self.call("POST", new, body), "POST", new, 201, 422)
        if made.status == 201:
            self.say(f"upload: created the release {tag}")
            return _release(made.json(new), new)
        again = self._ok(self.call("GET", url), "GET", url, 200, 404)  # 422: made meanwhile (another run), or refused
        if again.status != 200:
            raise CuwError(f"upload: POST {new} for {tag}: HTTP 422 {made.message()}; create the release {tag} by hand")
        return _release(again.json(url), url)

    def assets(self, release: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Every asset of ``release`` by name, every page read."""
        url: Optional[str] = f"{self._repo_api}/releases/{release['id']}/assets?per_page=100"
        out: dict[str, dict[str, Any]] = {}
        while url:
            page = self._ok(self.call("GET", url), "GET", url, 200)
            items = page.json(url)
            if not isinstance(items, list):
                raise CuwError(f"upload: GET {url}: not a list of assets; is $GITHUB_API_URL GitHub's API?")
            for item in items:
                out[_asset(item, url)["name"]] = item
            found = _NEXT.search(page.headers.get("link", ""))
            url = found.group(1) if found else None
        return out

    def sha256(self, asset: dict[str, Any]) -> str:
        """The asset's bytes, downloaded and hashed as they come (never held whole)."""
        url = f"{self._repo_api}/releases/assets/{asset['id']}"
        for attempt in range(TRIES):
            answer = self.call("GET", url, headers={"Accept": "application/octet-stream"})
            where = answer.headers.get("location")
            if answer.status in (301, 302, 303, 307, 308) and where:  # to the storage: no token goes there
                try:
                    with urllib.request.urlopen(where, timeout=TIMEOUT_S) as response:
                        digest = hashlib.sha256()
                        while block := response.read1(BLOCK):
                            digest.update(block)
                        return digest.hexdigest()
                except (OSError, http.client.HTTPException) as exc:
                    self.say(f"upload: reading {asset['name']} from {where}: {getattr(exc, 'reason', None) or exc}")
                    _sleep(BACKOFF_S * 2**attempt)
                    continue
            if answer.status == 200:
                return hashlib.sha256(answer.body).hexdigest()
            self._ok(answer, "GET", url, 200)
        raise CuwError(f"upload: cannot read the asset {asset['name']} ({url}) to compare its bytes; run it again")

    def delete(self, asset: dict[str, Any]) -> None:
        url = f"{self._repo_api}/releases/assets/{asset['id']}"
        self._ok(self.call("DELETE", url), "DELETE", url, 204, 404)

    def upload_once(self, release: dict[str, Any], name: str, path: Path) -> Answer:
        base = str(release["upload_url"]).split("{", 1)[0]
        return self.call("POST", f"{base}?name={quote(name, safe='')}", path, retry=False)


def _release(data: Any, url: str) -> dict[str, Any]:
    if not (isinstance(data, dict) and type(data.get("id")) is int and isinstance(data.get("upload_url"), str)):
        raise CuwError(f"upload: {url}: not a release (id, upload_url); is $GITHUB_API_URL GitHub's API?")
    return data


def _asset(item: Any, url: str) -> dict[str, Any]:
    if not (isinstance(item, dict) and isinstance(item.get("name"), str) and type(item.get("id")) is int):
        raise CuwError(f"upload: {url}: an asset without name and id; is $GITHUB_API_URL GitHub's API?")
    return item


@dataclass(frozen=True)
class Upload:
    """One file of the upload folder and where it goes."""

    path: Path
    tag: str
    name: str  # the asset's name
    title: str  # the release's title when it has to be made (the wheel's recipe)


@dataclass
class Outcome:
    uploaded: list[str] = field(default_factory=list)  # tag/name
    already: list[str] = field(default_factory=list)
    checked: int = 0  # assets the verification pass found as listed


def _where(url: str, server: str, repo: str, wheel: str, site: Path) -> tuple[str, str]:
    """(tag, asset name) of a wheel's asset URL, which must be a release download of ``repo``."""
    prefix = f"{server}/{repo}/releases/download/"
    tail = url[len(prefix) :] if url.startswith(prefix) else ""
    parts = tail.split("/")
    if len(parts) != 2 or not all(parts) or unquote(parts[1]) != wheel:
        raise InputError(
            f"upload: {site / MARKER} lists {wheel} at {url}, not a release asset of {repo}: publish with "
            f"--asset-url {server}/{repo}/releases/download/wheels-{{recipe}}/{{wheel}}"
        )
    return unquote(parts[0]), wheel


def plan(folder: Path, site: Path, endpoint: Endpoint) -> tuple[list[Upload], dict[str, tuple[str, str, int, str]]]:
    """Every file of ``folder`` with its release and name, and every asset the site's marker lists
    (wheel -> tag, name, size, sha256); refuses a file that belongs to no listed wheel."""
    if not folder.is_dir():
        raise InputError(f"upload: {folder} is not a folder (the files `cuw publish --upload` left)")
    if not (site / MARKER).is_file():
        raise InputError(f"upload: {site} holds no {MARKER}: give the index `cuw publish` wrote")
    files = published_files(site)
    remote = remote_files(site)
    marker_lists({"files": files, "remote": remote}, str(site / MARKER))
    listed = {
        wheel: (*_where(str(entry["url"]), endpoint.server, endpoint.repo, wheel, site), int(entry["size"]), files[wheel])
        for wheel, entry in sorted(remote.items())
    }
    uploads = []
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            raise InputError(f"upload: {path} is not a file; {folder} holds only what `cuw publish --upload` left")
        wheel = next((w for w in listed if path.name == w or path.name.startswith(w + ".")), None)
        if wheel is None:
            raise InputError(
                f"upload: {path.name} in {folder} belongs to no wheel {site / MARKER} lists as a release asset "
                "(a file goes beside the wheel it is named after); give the site that publish wrote with it"
            )
        recipe = _recipe(site / "files" / f"{wheel}{RECORD_SUFFIX}", path.with_name(wheel + RECORD_SUFFIX))
        tag = listed[wheel][0]
        uploads.append(Upload(path, tag, path.name, recipe or tag))
    return uploads, listed


def _recipe(*records: Path) -> Optional[str]:
    for record in records:
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("recipe"), str) and data["recipe"]:
            return str(data["recipe"])
    return None


def upload(folder: Path, site: Path, endpoint: Endpoint, say: Say) -> Outcome:
    """``cuw upload``: the files of ``folder`` as release assets, then the verification pass."""
    uploads, listed = plan(folder, site, endpoint)
    github = GitHub(endpoint, say)
    outcome = Outcome()
    releases: dict[str, dict[str, Any]] = {}
    assets: dict[str, dict[str, dict[str, Any]]] = {}
    for item in uploads:
        if item.tag not in releases:
            made = github.release(item.tag, item.title, create=True)
            assert made is not None
            releases[item.tag], assets[item.tag] = made, github.assets(made)
        _put(github, releases[item.tag], assets[item.tag], item, outcome)
    say(f"upload: {len(outcome.uploaded)} uploaded, {len(outcome.already)} already there; verifying every listed asset")
    problems, outcome.checked = _verify(github, uploads, listed)
    for problem in problems:
        say(f"upload: not as listed: {problem}")
    if problems:
        raise GateFailure(
            f"upload: {len(problems)} asset(s) are not on GitHub as the index lists them ({problems[0]}); "
            "the pages are not deployed: run it again (a rerun uploads only what is missing)"
        )
    return outcome


def _put(github: GitHub, release: dict[str, Any], assets: dict[str, dict[str, Any]], item: Upload, outcome: Outcome) -> None:
    """One file into its release: skipped when the same bytes are there, uploaded when absent,
    refused when other bytes are; an upload that fails is looked up before it is tried again."""
    where = f"{item.tag}/{item.name}"
    digest, size = sha256_of(item.path), item.path.stat().st_size
    last = ""
    for attempt in range(TRIES):
        there = assets.get(item.name)
        if there is not None and there.get("state", "uploaded") != "uploaded":
            github.say(f"upload: {where}: an upload cut off before ({there.get('state')}, no bytes served): uploading it again")
            github.delete(there)
            del assets[item.name]
            there = None
        if there is not None:
            same, how = _same(github, there, digest, size)
            if not same:
                raise GateFailure(
                    f"upload: {where}: the release already holds other bytes ({how}); an asset is never replaced, "
                    f"and nothing after it was uploaded: if no published index lists it (the Pages site's {MARKER}), "
                    "delete it from the release and run again"
                )
            outcome.already.append(where)
            github.say(f"upload: {where}: the same bytes are there ({how.split(':')[0]})")
            return
        answer = github.upload_once(release, item.name, item.path)
        if answer.status == 201:
            assets[item.name] = _asset(answer.json(where), where)
            outcome.uploaded.append(where)
            github.say(f"upload: uploaded {where}")
            return
        if answer.status != 422 and answer.status != 0 and answer.status < 500:
            github._ok(answer, "POST", f"{release['upload_url']} ({item.name})", 201)
        last = answer.error or f"HTTP {answer.status} {answer.message()}"
        # 422 (made meanwhile), a 5xx or a dropped connection: the asset may be there, whole or cut off.
        github.say(f"upload: {where}: {last}; looking at the release before trying again")
        assets.clear()
        assets.update(github.assets(release))
        if item.name not in assets and answer.status != 422:
            _sleep(BACKOFF_S * 2**attempt)
    raise CuwError(
        f"upload: {where}: the upload failed {TRIES} times ({last}); run it again (a rerun uploads only what is missing)"
    )


def _same(github: GitHub, asset: dict[str, Any], digest: str, size: int) -> tuple[bool, str]:
    """Whether ``asset`` holds the bytes of sha256 ``digest`` and ``size``, and how that was told."""
    reported = asset.get("digest")
    if isinstance(reported, str) and reported.startswith("sha256:"):
        theirs = reported.removeprefix("sha256:")
        return theirs == digest, f"digest: sha256 {theirs} there, {digest} here"
    if asset.get("size") != size:
        return False, f"size: {asset.get('size')} bytes there, {size} here"
    theirs = github.sha256(asset)
    return theirs == digest, f"downloaded: sha256 {theirs} there, {digest} here"


def _verify(github: GitHub, uploads: list[Upload], listed: dict[str, tuple[str, str, int, str]]) -> tuple[list[str], int]:
    """What is not on GitHub as it should be: every listed wheel's asset (present, uploaded, its size,
    its sha256 where GitHub reports one) and every file of the upload folder (the same, as here);
    and how many assets were looked at."""
    want: dict[tuple[str, str], tuple[int, str]] = {(tag, name): (size, sha) for tag, name, size, sha in listed.values()}
    for item in uploads:
        want[(item.tag, item.name)] = (item.path.stat().st_size, sha256_of(item.path))
    problems = []
    found: dict[str, Optional[dict[str, dict[str, Any]]]] = {}
    for (tag, name), (size, sha) in sorted(want.items()):
        if tag not in found:
            release = github.release(tag, tag, create=False)
            found[tag] = github.assets(release) if release is not None else None
        assets = found[tag]
        asset = assets.get(name) if assets is not None else None
        if assets is None:
            problems.append(f"{tag}/{name}: no release {tag}")
        elif asset is None:
            problems.append(f"{tag}/{name}: no such asset")
        elif asset.get("state", "uploaded") != "uploaded":
            problems.append(f"{tag}/{name}: state {asset.get('state')}, not uploaded")
        elif asset.get("size") != size:
            problems.append(f"{tag}/{name}: {asset.get('size')} bytes, listed {size}")
        elif isinstance(asset.get("digest"), str) and asset["digest"] != f"sha256:{sha}":
            problems.append(f"{tag}/{name}: {asset['digest']}, listed sha256:{sha}")
    return problems, len(want)


def check_first(site: str) -> None:
    """``cuw publish --first``: the index starts from empty only where ``site`` serves none (its
    marker answers 404); a site that serves one, or that cannot be read, is refused: a first publish
    deployed over a published site would drop every wheel it lists."""
    if not site.lower().startswith(("https://", "http://")):
        raise InputError(f"--first: --from-url {site}: the http(s) URL the index is (to be) served at")
    url = f"{site.rstrip('/')}/{MARKER}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            data = response.read(4 << 20)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code in (404, 410):
            return
        raise CuwError(
            f"--first: {url} answers HTTP {exc.code}: cannot tell whether an index is published there "
            "(a first publish needs a clear 404); run it again"
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        raise CuwError(
            f"--first: cannot read {url} ({getattr(exc, 'reason', None) or exc}): cannot tell whether an index is "
            "published there (a first publish needs a clear 404); run it again"
        ) from None
    try:
        count = len(marker_lists(json.loads(data.decode("utf-8")), url)[0])
        what = f"an index of {count} wheel(s)"
    except (CuwError, ValueError, UnicodeDecodeError):
        what = f"something at {MARKER}"
    raise InputError(
        f"--first: {site} already serves {what}; a first publish would start it from empty and drop them: "
        "leave out --first (unset CUW_PAGES_FIRST) and publish continues it"
    )
