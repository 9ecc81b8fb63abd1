"""./lab.sh: JupyterLab opens notebooks/*.py as notebooks (jupytext) on the project's kernel (docs/jupyterlab.md).

* The settings scripts/lab_setup.sh writes (the ``chunkstudy`` kernelspec, jupytext's default viewer), read back
  from a temporary prefix; the notebooks' headers name that kernel.
* A headless Jupyter server on a free port, with only those settings: the contents API opens
  ``notebooks/06_metrics.py`` as a notebook (jupytext's contents manager) and a session on the ``chunkstudy``
  kernel runs its parameters cell and a config load; the server and its kernel are stopped by their ids.
* (slow) JupyterLab in Debian's Chromium (Playwright's Python package, never a browser it downloads), on a
  scratch copy of the project with the demo's run: each of the eight notebooks opened by a double-click on
  "chunkstudy (.venv)", "Run All Cells" with no error output, every figure cell an image/png, every report image
  loaded, the .py unchanged after a save, no kernel left after Close and Shut Down, no 404 in the server log;
  then the runner's build/executed/demo/08_figures.html shows every figure.

The server tests skip with a message when JupyterLab is not in .venv (./lab.sh installs constraints/lab-lock.txt).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import jupytext
import pytest
from conftest import figure_cell

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venv" / "bin" / "python"
KERNEL, DISPLAY = "chunkstudy", "chunkstudy (.venv)"
NOTEBOOK = "notebooks/06_metrics.py"
READY_S = 180  # a loaded 2-core machine: the server's start, then the kernel's
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]


def _setup(prefix: Path) -> None:
    r = subprocess.run([str(ROOT / "scripts" / "lab_setup.sh"), str(prefix)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------------ the settings (no server)

def test_lab_setup_writes_the_kernelspec_and_the_default_viewer(tmp_path):
    _setup(tmp_path)
    spec = json.loads((tmp_path / "share/jupyter/kernels" / KERNEL / "kernel.json").read_text())
    assert spec["display_name"] == DISPLAY and spec["language"] == "python"
    assert Path(spec["argv"][0]) == VENV_PY          # this checkout's .venv, by its absolute path
    assert spec["argv"][-3:] == ["ipykernel_launcher", "-f", "{connection_file}"]
    assert spec["env"] == {"PYTHONHASHSEED": "0"}    # as the runner's kernels (scripts/ensure_env.sh)
    overrides = json.loads((tmp_path / "etc/jupyter/labconfig/default_setting_overrides.json").read_text())
    viewer = overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]["python"]
    assert viewer == "Jupytext Notebook"
    # no "Jupyter news" pop-up at every start (nor a request to the feed), and no autosave: an edit made in the
    # browser (params_file pointed at another corpus) reaches the tracked notebook only when saved on purpose
    assert overrides["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false", "checkForUpdates": False}
    assert overrides["@jupyterlab/docmanager-extension:plugin"]["autosave"] is False
    # ... the name of the widget factory jupytext's lab extension registers, where that extension is installed
    ext = ROOT / ".venv/share/jupyter/labextensions/jupyterlab-jupytext/static"
    if ext.is_dir():
        assert any(f'"{viewer}"' in p.read_text(errors="replace") for p in ext.glob("*.js"))
    # a second call (./lab.sh runs it at every start) rewrites the same files without error
    _setup(tmp_path)
    assert json.loads((tmp_path / "share/jupyter/kernels" / KERNEL / "kernel.json").read_text()) == spec


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")), ids=lambda p: p.name)
def test_notebook_headers_name_the_project_kernel(path):
    nb = jupytext.read(path)
    assert nb.metadata["kernelspec"] == {"name": KERNEL, "display_name": DISPLAY, "language": "python"}, path.name
    assert nb.metadata["jupytext"]["text_representation"]["format_name"] == "percent", path.name


def _locked(name: str) -> dict[str, str]:
    text = (ROOT / "constraints" / name).read_text()
    return {m[0]: m[1] for m in re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+) \\$", text, re.M)}


def test_lab_lock_pins_the_lab_extra_beyond_the_project_lock():
    """constraints/lab-lock.txt: the [lab] extra at versions its ranges allow, every package hashed, none the CPU
    lock already pins; where JupyterLab is installed, every dependency of a lab-lock package is locked in one of
    the two files (so ./lab.sh's --no-deps install is complete) and the installed versions are the locked ones."""
    import tomllib
    from importlib import metadata
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name as canon
    lab, cpu = _locked("lab-lock.txt"), _locked("cpu-lock.txt")
    assert lab and not set(lab) & set(cpu)
    text = (ROOT / "constraints" / "lab-lock.txt").read_text()
    assert text.count("==") == len(lab) and all(f"{n}=={v} \\\n    --hash=sha256:" in text for n, v in lab.items())
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lab"]
    for req in map(Requirement, extra):
        assert canon(req.name) in lab and req.specifier.contains(lab[canon(req.name)]), req
    try:
        metadata.version("jupyterlab")
    except metadata.PackageNotFoundError:
        return  # not installed here: the closure is checked where ./lab.sh has installed it
    locked = {canon(n): v for n, v in {**cpu, **lab}.items()}
    for name, version in lab.items():
        assert metadata.version(name) == version, name
        for dep in map(Requirement, metadata.requires(name) or []):
            if dep.marker is None or dep.marker.evaluate({"extra": ""}):
                assert canon(dep.name) in locked, f"{name} needs {dep.name}, in neither lock"
                assert dep.specifier.contains(locked[canon(dep.name)], prereleases=True), (name, dep)


# ------------------------------------------------------------------------------------ a headless server

def _need_lab() -> None:
    r = subprocess.run([str(VENV_PY), "-c", "import jupyterlab, jupyter_server, websocket"], capture_output=True)
    if r.returncode != 0:
        pytest.skip("JupyterLab is not installed in .venv (./lab.sh installs it from constraints/lab-lock.txt)")


class Server:
    """``jupyter lab`` (or ``jupyter server``) in its own process group, the settings of lab_setup.sh from a
    temporary prefix only (JUPYTER_PATH, JUPYTER_CONFIG_PATH), port 0 (the server picks a free one and says which
    in its runtime file), serving ``root`` (default: this checkout). ``args``: more options for the server."""

    def __init__(self, tmp: Path, app: str = "server", overrides: dict | None = None, root: Path = ROOT,
                 args: tuple[str, ...] = ()):
        _setup(tmp / "prefix")
        if overrides:  # more lab defaults on top of lab_setup.sh's (the browser test's rendering mode), per plugin
            f = tmp / "prefix/etc/jupyter/labconfig/default_setting_overrides.json"
            settings = json.loads(f.read_text())
            for plugin, values in overrides.items():
                settings.setdefault(plugin, {}).update(values)
            f.write_text(json.dumps(settings))
        self.token, self.root = uuid.uuid4().hex, root
        self.runtime = tmp / "runtime"
        env = {**os.environ, "JUPYTER_PATH": str(tmp / "prefix/share/jupyter"),
               "JUPYTER_CONFIG_PATH": str(tmp / "prefix/etc/jupyter"), "JUPYTER_RUNTIME_DIR": str(self.runtime),
               "JUPYTER_CONFIG_DIR": str(tmp / "config"), "IPYTHONDIR": str(tmp / "ipython"),
               "JUPYTER_PLATFORM_DIRS": "1"}
        env.pop("MPLBACKEND", None)  # as ./lab.sh: the kernel's own (inline) backend
        env.pop("CHUNKSTUDY_ROOT", None)
        self.log = open(tmp / "server.log", "w")
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv/bin/jupyter"), app, "--no-browser", "--ServerApp.port=0", "--ServerApp.ip=127.0.0.1",
             f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}", "--allow-root", *args],
            cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.url = self._ready()

    def _ready(self) -> str:
        """Poll the runtime file the server writes once it listens, then its /api/status; fail if it exits."""
        deadline, url = time.monotonic() + READY_S, None
        info = self.runtime / f"jpserver-{self.proc.pid}.json"
        while time.monotonic() < deadline:
            if url is None and info.is_file():
                try:
                    url = json.loads(info.read_text())["url"].rstrip("/")
                except (ValueError, KeyError):
                    url = None  # half written: read it again
            if url is not None:
                try:
                    if self.api("GET", "/api/status", base=url) is not None:
                        return url
                except (urllib.error.URLError, ConnectionError):
                    pass
            try:  # waits on the process: returns at once if it died
                self.proc.wait(timeout=0.2)
                raise AssertionError(f"jupyter exited ({self.proc.returncode}): {self.tail()}")
            except subprocess.TimeoutExpired:
                pass
        raise AssertionError(f"jupyter not ready in {READY_S} s: {self.tail()}")

    def tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()[-3000:]

    def api(self, method: str, path: str, body: dict | None = None, base: str | None = None):
        req = urllib.request.Request(f"{base or self.url}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            data = r.read()
        return json.loads(data) if data else {}

    def kernel_pids(self) -> list[int]:
        """The kernels this server started: ipykernel processes whose connection file is in its runtime folder
        (jupyter_client starts each kernel in a session of its own, outside the server's process group)."""
        pids = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"ipykernel_launcher" in argv and any(a.startswith(str(self.runtime).encode()) for a in argv):
                pids.append(int(proc.name))
        return pids

    def stop(self) -> None:
        """SIGTERM to the server by its pid (it shuts its kernels down), then check that neither its process group
        nor any kernel it started outlived it (those are killed by pid, and the test fails)."""
        kernels = self.kernel_pids()
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: jupyter_server stops its loop, then shuts its kernels down
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.log.close()
        left = [pid for pid in kernels if _alive(pid)]
        try:
            os.killpg(self.proc.pid, 0)  # start_new_session: the group's id is the server's pid
            group = True
        except ProcessLookupError:
            group = False
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        if group:
            os.killpg(self.proc.pid, signal.SIGKILL)
        assert not left and not group, f"outlived the jupyter server (killed): kernels {left}, its group {group}"


def _alive(pid: int) -> bool:
    """Whether pid runs (not a zombie) after its server exited: its parent went, so init reaps it; read
    /proc/PID/stat until it is gone or 30 s passed."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)  # a poll of the kernel's exit (it is not our child: no wait() to block on)
    return True


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A headless server on a scratch copy of the project (tests/conftest.py's make_project), so that what a test
    saves through it never touches this checkout."""
    from conftest import make_project

    _need_lab()
    tmp = tmp_path_factory.mktemp("lab")
    s = Server(tmp, root=make_project(tmp / "project"))
    try:
        yield s
    finally:
        s.stop()


def _execute(server: Server, kernel_id: str, code: str) -> tuple[dict, str]:
    """Run code on a kernel over its websocket channels; return (execute_reply content, stdout text)."""
    import websocket
    ws = websocket.create_connection(server.url.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels",
                                     header=[f"Authorization: token {server.token}"], timeout=READY_S)
    try:
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps({"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                                       "session": uuid.uuid4().hex, "version": "5.3"},
                            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                            "content": {"code": code, "silent": False, "store_history": True,
                                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        reply, out, idle = None, [], False
        while reply is None or not idle:
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "execute_reply":
                reply = msg["content"]
            elif kind == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])
            elif kind == "error":
                out.append("\n".join(msg["content"]["traceback"]))
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        return reply, "".join(out)
    finally:
        ws.close()


def test_server_opens_a_py_notebook_and_runs_a_cell_on_the_project_kernel(server):
    specs = server.api("GET", "/api/kernelspecs")
    assert KERNEL in specs["kernelspecs"], sorted(specs["kernelspecs"])
    assert specs["kernelspecs"][KERNEL]["spec"]["display_name"] == DISPLAY
    # the .py file through the contents API as a notebook: jupytext's contents manager (a plain one answers 400)
    model = server.api("GET", f"/api/contents/{NOTEBOOK}?type=notebook&content=1")
    assert model["type"] == "notebook" and model["format"] == "json"
    nb = model["content"]
    assert nb["metadata"]["kernelspec"]["name"] == KERNEL
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    params = next(c for c in code if "parameters" in c["metadata"].get("tags", []))
    assert params["source"] == 'params_file = "params/demo.yaml"'
    # a session as JupyterLab starts one for the notebook: the kernel its header names, in notebooks/
    sess = server.api("POST", "/api/sessions", {"path": NOTEBOOK, "type": "notebook", "name": "06_metrics.py",
                                                 "kernel": {"name": KERNEL}})
    assert sess["kernel"]["name"] == KERNEL
    try:
        reply, out = _execute(server, sess["kernel"]["id"], params["source"] + "\n" + (
            "import os, sys\nfrom chunkstudy import artifacts, config\n"
            "print(sys.executable, os.environ.get('PYTHONHASHSEED'), os.getcwd(), config.load(params_file).corpus,"
            " artifacts.reading_stage())"))
        assert reply["status"] == "ok", out
        exe, seed, cwd, corpus, reader = out.split()
        assert (Path(exe), seed, Path(cwd), corpus) == (VENV_PY, "0", server.root / "notebooks", "demo")
        # the server tells the kernel which notebook it runs (JPY_SESSION_NAME): a missing input's message names
        # the command that feeds this notebook (artifacts.run_command)
        assert reader == "06_metrics"
        assert server.kernel_pids()  # the kernel, seen by its connection file (the server's stop checks it ends)
    finally:
        server.api("DELETE", f"/api/sessions/{sess['id']}")
    assert server.api("GET", "/api/kernels") == []


def test_jupyterlab_takes_the_settings_lab_setup_writes(server):
    """The defaults JupyterLab's settings API serves for the plugins lab_setup.sh configures (its schemas' defaults
    with the overrides applied; a user's own settings come on top): the news feed never fetched nor asked about, no
    update check, no autosave, .py files opened as notebooks."""
    def default(plugin: str, key: str):
        return server.api("GET", f"/lab/api/settings/{plugin}")["schema"]["properties"][key]["default"]

    assert default("@jupyterlab/apputils-extension:notification", "fetchNews") == "false"
    assert default("@jupyterlab/apputils-extension:notification", "checkForUpdates") is False
    assert default("@jupyterlab/docmanager-extension:plugin", "autosave") is False
    assert default("@jupyterlab/docmanager-extension:plugin", "defaultViewers")["python"] == "Jupytext Notebook"


def test_saving_a_notebook_through_the_server_writes_its_py_back_unchanged(server):
    """A save in JupyterLab (the contents API's PUT, jupytext writing the .py) added ``format_version`` and
    ``jupytext_version`` to the header: every notebook saved, even unedited, was a modified tracked file.
    notebooks/jupytext.toml filters them out. Each notebook as JupyterLab sends it back (the kernel's
    ``language_info`` added, as it does on opening) is written byte for byte as it was."""
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        api = f"/api/contents/notebooks/{path.name}"
        nb = server.api("GET", f"{api}?type=notebook&content=1")["content"]
        nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python",
                                           "file_extension": ".py", "pygments_lexer": "ipython3"}
        saved = server.api("PUT", api, {"type": "notebook", "format": "json", "content": nb})
        assert saved["path"] == f"notebooks/{path.name}"
        assert (server.root / "notebooks" / path.name).read_bytes() == path.read_bytes(), path.name


# ------------------------------------------------------------------------------------ in a real browser

def _chromium() -> str:
    exe = os.environ.get("CHUNKSTUDY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).is_file():
        pytest.skip("browser test: no Chromium (apt-get install -y chromium, or set CHUNKSTUDY_CHROMIUM)")
    return exe


#: Every notebook of the pipeline, in run order; a cell ``bundle.figures["<name>"]`` shows one figure, a cell
#: ``bundle.figures.get("<name>")`` one when the report has it (tests/conftest.py's figure_cell).
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
#: docs/jupyterlab.md's picture: 08 in JupyterLab, its first figure inline, written by the browser test when
#: CHUNKSTUDY_DOCS_IMG=1 (else into the test's temporary folder: the same shot, checked, not kept).
DOCS_SHOT = ROOT / "docs" / "img" / "jupyterlab-08-figure.png"
#: The notebook on screen, as JupyterLab holds it (the browser test's server exposes the app to the page).
_CODE_CELLS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  return w.content.model.toJSON().cells.filter(c => c.cell_type === "code").map(c => ({
    source: Array.isArray(c.source) ? c.source.join("") : c.source, count: c.execution_count,
    outputs: c.outputs.map(o => ({type: o.output_type, mimes: Object.keys(o.data || {}),
                                  error: o.output_type === "error" ? o.ename + ": " + o.evalue : null}))}));
}"""


def test_every_cell_that_shows_a_figure_is_found_whatever_its_call_form():
    """The browser test found figure cells by ``bundle.figures["..."]`` alone, so 08's
    ``bundle.figures.get("fig_multiverse")`` was never checked. Every code cell of a notebook that reads
    ``bundle.figures`` is a figure cell now (tests/conftest.py's figure_cell), required or not; 08 has both forms."""
    found = {}
    for path in NOTEBOOKS:
        for cell in jupytext.read(path).cells:
            if cell.cell_type == "code" and "bundle.figures" in cell.source:
                assert figure_cell(cell.source) is not None, (path.name, cell.source)
                found[figure_cell(cell.source)[0]] = figure_cell(cell.source)[1]
    assert found["fig_contrasts"] is True and found["fig_multiverse"] is False and len(found) >= 9


def _loaded_images(locator) -> list[int]:
    """The natural width of every ``img`` the locator finds: 0 for one that did not load."""
    return locator.evaluate_all("els => els.map(e => e.complete ? e.naturalWidth : 0)")


def _run_in_lab(page, pw, lab: Server, path: Path, shot: Path, written: Path) -> dict:
    """Open ``path`` by double-click, run all its cells, check its outputs (every figure cell, whatever its call
    form: one image, or for a ``.get(...)`` cell one exactly when 08 wrote that figure into ``written``), save it,
    close it and shut its kernel down; returns what was counted (figure cells shown, report images)."""
    page.locator(".jp-DirListing-item", has_text=path.name).dblclick()
    panel = page.locator(".jp-NotebookPanel:visible")
    panel.wait_for()                                                  # a notebook, not a text editor
    assert page.locator(".jp-FileEditor:visible").count() == 0, path.name
    pw.expect(panel.locator(".jp-KernelName, [data-jp-item-name='kernelName']").first).to_have_text(DISPLAY)
    pw.expect(panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)
    n_code = sum(c.cell_type == "code" for c in jupytext.read(path).cells)
    page.get_by_role("menuitem", name="Run").click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
    # stop_on_error: after an error the later cells keep an empty prompt; done when the last cell has its number
    # or a traceback shows, whichever comes first
    prompts = panel.locator(".jp-CodeCell .jp-InputPrompt")
    pw.expect(prompts).to_have_count(n_code)
    last = prompts.nth(n_code - 1).filter(has_text=re.compile(r"\[\d+\]"))
    last.or_(panel.locator(".jp-OutputArea-output", has_text="Traceback")).first.wait_for(timeout=900_000)
    cells = page.evaluate(_CODE_CELLS)
    errors = [(c["source"][:60], o["error"]) for c in cells for o in c["outputs"] if o["type"] == "error"]
    assert not errors, (path.name, errors)
    assert all(c["count"] for c in cells), (path.name, [c["source"][:60] for c in cells if not c["count"]])
    figures, expected = {}, {}
    for c in cells:
        if (found := figure_cell(c["source"])) is not None:
            name, required = found
            figures[name] = sum("image/png" in o["mimes"] for o in c["outputs"])
            # a .get(...) cell shows its figure when 08 wrote it (in JupyterLab: under build/lab/), else nothing
            expected[name] = 1 if required or (written / f"{name}.png").is_file() else 0
    assert figures == expected, (path.name, figures, expected)
    figures = {n: k for n, k in figures.items() if k}
    shown = panel.locator(".jp-OutputArea-output[data-mime-type='image/png'] img")
    assert len(figures) <= len(sizes := _loaded_images(shown)) and all(sizes), (path.name, sizes)
    report = panel.locator(".jp-OutputArea-output[data-mime-type='text/markdown'] img")  # 08's report cell
    assert all(report_sizes := _loaded_images(report)), (path.name, report_sizes)
    if figures:  # JupyterLab as it shows the first figure cell, at the top of the notebook's view
        first = panel.locator(".jp-CodeCell", has=page.locator(".jp-InputArea", has_text=next(iter(figures))))
        first.evaluate("e => e.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(shot))
    # saved (as a researcher would, and as autosave does): jupytext writes the same .py back
    page.evaluate("() => { window.jupyterapp.commands.execute('docmanager:save'); }")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")
    # File > Close and Shut Down Notebook, confirmed (a tab's close button leaves the kernel running: jupytext's
    # notebook factory does not take JupyterLab's kernelShutdown setting, docs/jupyterlab.md)
    page.get_by_role("menuitem", name="File").click()
    page.get_by_role("menuitem", name=re.compile(r"^Close and Shut Down Notebook")).click()
    page.locator(".jp-Dialog .jp-mod-accept").click()
    panel.wait_for(state="detached")
    deadline = time.monotonic() + READY_S
    while (lab.api("GET", "/api/kernels") or lab.kernel_pids()) and time.monotonic() < deadline:
        page.wait_for_timeout(200)  # a poll of the server's kernel list and of /proc (no event tells us)
    assert lab.api("GET", "/api/kernels") == [] and lab.kernel_pids() == [], f"{path.name}: its kernel outlived it"
    return {"figures": len(figures), "report_images": len(report_sizes)}


@pytest.mark.slow
def test_lab_opens_every_notebook_by_double_click_and_runs_it(tmp_path):
    """The demo's stages first (./run_all.sh demo; those already current are skipped), then, in JupyterLab in
    Debian's Chromium, on a scratch copy of the project holding that run's data/demo/ (so the notebooks rerun there
    and the checkout's run stays as the runner left it): each of the eight notebooks opened by a double-click on
    "chunkstudy (.venv)", all cells run with no error output, every ``bundle.figures[...]`` cell an image/png that
    loads, every image of 08's report loaded, the notebook saved and its .py unchanged byte for byte, closed
    with its kernel shut down and none left; no 404 in the server's log. Then the runner's HTML export of the
    executed 08 (build/executed/demo/08_figures.html) in the same browser: every figure there loads, and the page
    asks for nothing beyond its own file (no CDN: it works offline). The notebooks run in JupyterLab wrote under
    build/lab/ of the scratch copy: its data/demo/ is byte for byte and mtime for mtime as the runner left it, and a
    headless run there afterwards skips every stage."""
    from conftest import make_project

    from chunkstudy import runner

    _need_lab()
    pw = pytest.importorskip("playwright.sync_api", reason="browser test: the playwright package is not installed")
    exe = _chromium()
    runner.run(ROOT / "params" / "demo.yaml", ROOT, log=print)
    project = make_project(tmp_path / "project")
    shutil.copytree(ROOT / "data" / "demo", project / "data" / "demo")
    shutil.copytree(ROOT / "figures" / "demo", project / "figures" / "demo")
    runner.run(project / "params" / "demo.yaml", project, log=print)  # the copy's own manifests (01's source paths)
    state = _run_state(project)
    before = {p.name: p.read_bytes() for p in NOTEBOOKS}
    shot = DOCS_SHOT if os.environ.get("CHUNKSTUDY_DOCS_IMG") == "1" else tmp_path / DOCS_SHOT.name
    # JupyterLab renders only the cells in view by default; "none" keeps every cell (and its prompt) in the page
    # (no news prompt over the notebook: lab_setup.sh turns it off for every user)
    lab = Server(tmp_path, app="lab", root=project, args=("--LabApp.expose_app_in_browser=True",),
                 overrides={"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}})
    counted = {}
    try:
        with pw.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.set_default_timeout(READY_S * 1000)
                page.goto(f"{lab.url}/lab/tree/notebooks?token={lab.token}")
                for path in NOTEBOOKS:
                    counted[path.stem] = _run_in_lab(page, pw, lab, project / "notebooks" / path.name, shot,
                                                     project / "build/lab/figures/demo")
                    assert (project / "notebooks" / path.name).read_bytes() == before[path.name], path.name
                html = ROOT / "build" / "executed" / "demo" / "08_figures.html"
                asked: list[str] = []
                page.on("request", lambda r: asked.append(r.url))
                page.goto(html.as_uri())
                images = page.locator("img")
                sizes = _loaded_images(images)
                assert all(sizes), sizes
                assert len(sizes) == counted["08_figures"]["figures"] + counted["08_figures"]["report_images"]
                assert [u for u in asked if not u.startswith(("file:", "data:"))] == []  # offline: no CDN
            finally:
                browser.close()
    finally:
        lab.stop()
    print(counted)
    report_md = (project / "build/lab/figures/demo/report.md").read_text()
    in_report = len(re.findall(r"!\[[^]]*\]\(\w+\.png\)", report_md))
    assert counted["08_figures"]["figures"] >= 8 and counted["08_figures"]["report_images"] == in_report >= 8
    assert sum(c["figures"] for c in counted.values()) == counted["08_figures"]["figures"]
    log = (tmp_path / "server.log").read_text()
    assert not re.findall(r".*\b404 (?:GET|POST|PUT|PATCH|DELETE) .*", log), log[-3000:]
    assert shot.stat().st_size > 10_000
    assert _run_state(project) == state  # the run as the runner left it: JupyterLab wrote under build/lab/
    again = runner.run(project / "params" / "demo.yaml", project, log=print)
    assert {status for _, status, _ in again} == {"skipped"}


def _run_state(project: Path) -> dict[str, tuple[int, int]]:
    """``{path: (size, mtime_ns)}`` of every file a headless run of demo left under data/demo/ (caches aside) and
    figures/demo/."""
    return {str(f.relative_to(project)): (f.stat().st_size, f.stat().st_mtime_ns)
            for top in (project / "data/demo", project / "figures/demo") for f in sorted(top.rglob("*"))
            if f.is_file() and "cache" not in f.relative_to(top).parts}
