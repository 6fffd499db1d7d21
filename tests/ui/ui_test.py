#!/usr/bin/env python3
"""The agent UI in a real browser: `tenure agent -ui` with real `tenure lock`
processes, headless Chromium driven over the W3C WebDriver protocol.

    ui_test.py --tenure PATH --chromium PATH --chromedriver PATH --artifacts DIR

Python's standard library only (urllib speaks WebDriver's JSON over HTTP).
Scenario A: three holders of one key (a clean release, then a kill -9 whose
session expires into a lock-delay) must show in the page as they happen, the
handover within 1 s; screenshots at 1280x800 and 390x844 go to DIR. Scenario B:
with ACLs on, the page asks for a token and shows the key once given one.
Scenario C: without -ui, /ui/ is a 404. Every process started here is stopped
on the way out, failure or not. Exit 0 on success, 1 with a message otherwise.
"""
import argparse
import base64
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

CSP = "default-src 'self'; img-src 'self' data:"
KEY = "ui/job/.lock"
CHILD = ["sh", "-c", "echo acquired $$ $TENURE_FENCING_TOKEN; exec sleep 600"]
T0 = time.monotonic()


class Fail(Exception):
    pass


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def _die_with_parent():
    # Children get SIGKILL should this script be killed without running its
    # finally blocks (a CTest timeout).
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# ---- processes ----------------------------------------------------------------

class Proc:
    """A child process whose stdout lines are read (and time-stamped) by a thread."""

    def __init__(self, name, argv, artifacts):
        self.name = name
        self.argv = argv
        self.lines = []  # (monotonic time read, text)
        self.eof = False
        self.cv = threading.Condition()
        self.stderr_path = os.path.join(artifacts, f"{name}.stderr.log")
        self.stderr = open(self.stderr_path, "wb")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.stderr,
                                  start_new_session=True, preexec_fn=_die_with_parent)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.p.stdout:
            with self.cv:
                self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))
                self.cv.notify_all()
        with self.cv:
            self.eof = True
            self.cv.notify_all()

    def wait_line(self, pattern, timeout):
        """The first stdout line matching `pattern`: (match, time it was read)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for at, text in self.lines:
                    m = rx.search(text)
                    if m:
                        return m, at
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    break
                self.cv.wait(left)
        raise Fail(f"{self.name}: no stdout line matching {pattern!r} within {timeout} s "
                   f"(exit status {self.p.poll()}); stdout: {[t for _, t in self.lines]}; "
                   f"stderr: {self.stderr_tail()}")

    def stderr_tail(self, n=1500):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def wait(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def descendants(pid):
    """Every process below `pid` (from /proc), deepest last."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_quietly(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


# ---- HTTP ---------------------------------------------------------------------

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def http(method, url, body=None, headers=None, timeout=10):
    """(status, headers, body bytes); HTTP errors are answers, not exceptions."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with OPENER.open(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- WebDriver ------------------------------------------------------------------

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class Browser:
    def __init__(self, chromedriver, chromium, artifacts):
        self.artifacts = artifacts
        self.sid = None
        port = free_port()
        self.log = open(os.path.join(artifacts, "chromedriver.log"), "wb")
        self.p = subprocess.Popen([chromedriver, f"--port={port}"], stdin=subprocess.DEVNULL, stdout=self.log,
                                  stderr=self.log, start_new_session=True, preexec_fn=_die_with_parent)
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while True:
            try:
                status, _, body = http("GET", self.base + "/status", timeout=2)
                if status == 200 and json.loads(body)["value"].get("ready"):
                    break
            except (OSError, ValueError, KeyError):
                pass
            check(self.p.poll() is None, f"chromedriver exited with status {self.p.returncode}; see chromedriver.log")
            check(time.monotonic() < deadline, "chromedriver did not become ready within 15 s")
            time.sleep(0.05)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,800", "--no-first-run", "--no-default-browser-check"],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}}
        self.sid = self._req("POST", "/session", caps, timeout=60)["sessionId"]

    def _req(self, method, path, body=None, timeout=30):
        status, _, raw = http(method, self.base + path, body, timeout=timeout)
        try:
            value = json.loads(raw)["value"]
        except (ValueError, KeyError):
            raise Fail(f"WebDriver {method} {path}: HTTP {status}, not JSON: {raw[:300]!r}")
        if status != 200:
            raise Fail(f"WebDriver {method} {path}: {value.get('error')}: {value.get('message', '')[:500]}")
        return value

    def cmd(self, method, path, body=None):
        return self._req(method, f"/session/{self.sid}{path}", body if body is not None or method != "POST" else {})

    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait(self, script, what, timeout=10, *args):
        """Poll `script` (a function body) every 50 ms until it returns a truthy value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(script, *args)
            if value:
                return value
            if time.monotonic() > deadline:
                raise Fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)

    def find(self, css):
        return self.cmd("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def type(self, css, text):
        self.cmd("POST", f"/element/{self.find(css)}/value", {"text": text})

    def click(self, css):
        self.cmd("POST", f"/element/{self.find(css)}/click", {})

    def screenshot(self, name):
        png = base64.b64decode(self.cmd("GET", "/screenshot"))
        path = os.path.join(self.artifacts, name)
        with open(path, "wb") as f:
            f.write(png)
        log(f"screenshot {path}")

    def viewport(self, width, height):
        """Resize the window so that the page's viewport is width x height."""
        self.cmd("POST", "/window/rect", {"width": width, "height": height})
        inner = self.wait("return window.innerWidth && [window.innerWidth, window.innerHeight];", "a viewport", 5)
        if inner != [width, height]:  # the window's frame takes some of it
            self.cmd("POST", "/window/rect", {"width": 2 * width - inner[0], "height": 2 * height - inner[1]})
        self.wait("return window.innerWidth === arguments[0] && window.innerHeight === arguments[1];",
                  f"a {width}x{height} viewport", 5, width, height)

    def console(self):
        try:
            return self.cmd("POST", "/se/log", {"type": "browser"})
        except Fail:
            return []

    def close(self):
        if self.sid:
            try:
                http("DELETE", f"{self.base}/session/{self.sid}", timeout=10)
            except OSError:
                pass
            self.sid = None
        rest = descendants(self.p.pid)  # Chromium and its helpers
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        for pid in rest:
            kill_quietly(pid)


# ---- the page, as the test sees it ---------------------------------------------------

# Functions shared by the scripts below (prepended to each).
PAGE = r"""
const card = key => document.querySelector(`.lock[data-key="${CSS.escape(key)}"]`);
const field = (key, name) => { const c = card(key); const f = c && c.querySelector(`[data-field="${name}"]`);
  return f ? f.textContent.trim() : null; };
const sessionNames = () => [...document.querySelectorAll('[data-session]')].map(r => r.querySelector('th, td').textContent.trim());
"""


def page(body):
    return PAGE + body


def holder_is(browser, key, name, timeout=10):
    return browser.wait(page("return field(arguments[0], 'holder') === arguments[1];"),
                        f"{key}'s holder to show as {name!r}", timeout, key, name)


def lock_index(browser, key):
    text = browser.js(page("return field(arguments[0], 'lock-index');"), key)
    check(text is not None and text.isdigit(), f"{key}: [data-field=lock-index] is {text!r}, not a number")
    return int(text)


def session_shown(browser, name, timeout=10):
    browser.wait(page("return sessionNames().includes(arguments[0]);"), f"session {name!r} in the sessions table",
                 timeout, name)


def no_horizontal_scroll(browser, where):
    w = browser.js("return [document.documentElement.scrollWidth, window.innerWidth];")
    check(w[0] <= w[1], f"{where}: the page scrolls sideways (scrollWidth {w[0]} > innerWidth {w[1]})")


def check_console(browser):
    bad = [e.get("message", "") for e in browser.console()
           if e.get("level") == "SEVERE" and ("Content Security Policy" in e.get("message", "")
                                             or "Uncaught" in e.get("message", ""))]
    check(not bad, f"the page logged errors: {bad}")


# ---- the scenarios ---------------------------------------------------------------------

class Run:
    def __init__(self, args):
        self.args = args
        self.procs = []
        self.child_pids = []  # the `sleep` children of tenure lock (from their "acquired PID" line)
        self.browser = None

    def start(self, name, argv):
        p = Proc(name, argv, self.args.artifacts)
        self.procs.append(p)
        return p

    def agent(self, name, *flags):
        p = self.start(name, [self.args.tenure, "agent", "-http-addr", "127.0.0.1:0", "-session-ttl-min", "100ms",
                              "-log-level", "warn", *flags])
        m, _ = p.wait_line(r"^tenure agent listening on (http://\S+)$", 15)
        log(f"{name} listening on {m.group(1)}")
        return p, m.group(1)

    def lock(self, name, addr, prefix, *flags):
        return self.start(f"lock-{name}", [self.args.tenure, "lock", "-http-addr", addr, "-name", name,
                                           "-session-ttl", "1s", "-lock-delay", "2s", *flags, "-shell=false",
                                           prefix, *CHILD])

    def acquired(self, proc, timeout=15):
        m, at = proc.wait_line(r"^acquired (\d+) ?(\S*)", timeout)
        self.child_pids.append(int(m.group(1)))
        return at, m.group(2)

    def cleanup(self):
        # tenure lock first (SIGTERM: it stops its child and releases), then
        # the agents, then the browser; SIGKILL whatever does not stop.
        locks = [p for p in self.procs if p.name.startswith("lock-")]
        others = [p for p in self.procs if not p.name.startswith("lock-")]
        for group in (locks, others):
            for p in group:
                p.signal(signal.SIGTERM)
            deadline = time.monotonic() + 5
            for p in group:
                if p.wait(max(0.1, deadline - time.monotonic())) is None:
                    log(f"{p.name} did not stop on SIGTERM within 5 s; killing it")
                    kill_quietly(-p.p.pid)
                    p.p.kill()
                    p.wait(5)
        for pid in self.child_pids:  # a child that outlived its supervisor
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"sleep" in f.read():
                        log(f"child {pid} was still running; killing it")
                        kill_quietly(pid)
            except OSError:
                pass
        if self.browser:
            self.browser.close()
        log("cleaned up")
        for p in self.procs:
            p.stderr.close()

    def failure_artifacts(self):
        if not self.browser or not self.browser.sid:
            return
        try:
            self.browser.screenshot("failure.png")
            html = self.browser.js("return document.documentElement.outerHTML;")
            with open(os.path.join(self.args.artifacts, "failure.html"), "w") as f:
                f.write(html)
            for e in self.browser.console():
                log(f"console {e.get('level')}: {e.get('message')}")
        except Exception as e:  # the browser may be what failed
            log(f"(no failure artifacts: {e})")

    def run(self):
        self.scenario_c_off_by_default()
        self.browser = Browser(self.args.chromedriver, self.args.chromium, self.args.artifacts)
        log("browser session started")
        self.scenario_a()
        self.scenario_b()
        check_console(self.browser)

    # -- C: no -ui, no page ----------------------------------------------------
    def scenario_c_off_by_default(self):
        agent, addr = self.agent("agent-no-ui", "-node", "ui-off")
        status, _, _ = http("GET", addr + "/ui/")
        check(status == 404, f"an agent without -ui answered {status} on /ui/, want 404")
        status, _, _ = http("GET", addr + "/v1/tenure/history")
        check(status == 200, f"an agent without -ui answered {status} on /v1/tenure/history, want 200")
        agent.signal(signal.SIGTERM)
        check(agent.wait(10) is not None, "agent-no-ui did not stop on SIGTERM")
        log("C: without -ui, /ui/ is a 404")

    # -- A: three holders, a release, a kill -9 ----------------------------------
    def scenario_a(self):
        b = self.browser
        agent, addr = self.agent("agent-a", "-ui", "-node", "ui-test")
        self.static_files(addr)

        b.go(addr + "/ui/")
        b.js("performance.setResourceTimingBufferSize(100000);")  # for no_polling()
        b.wait("const s = document.getElementById('status'); return s && s.dataset.state === 'live';",
               "#status[data-state=live]", 10)
        log("A: page live")

        alpha = self.lock("alpha", addr, "ui/job")
        _, alpha_token = self.acquired(alpha)
        holder_is(b, KEY, "alpha", 5)
        idx_alpha = lock_index(b, KEY)
        check(not alpha_token or int(alpha_token) == idx_alpha,
              f"the page shows LockIndex {idx_alpha}, alpha's TENURE_FENCING_TOKEN is {alpha_token}")
        state = b.js(page("const c = card(arguments[0]).querySelector('[data-field=state]');"
                          "return [c.dataset.state, c.textContent];"), KEY)
        check(state == ["held", "held by alpha"], f"state of {KEY} while alpha holds it: {state}")
        log(f"A: alpha holds {KEY}, LockIndex {idx_alpha}")

        bravo = self.lock("bravo", addr, "ui/job")
        session_shown(b, "bravo")
        alpha.signal(signal.SIGTERM)
        bravo_at, _ = self.acquired(bravo)
        holder_is(b, KEY, "bravo", 5)
        lag = time.monotonic() - bravo_at
        check(lag <= 1.0, f"the page showed bravo as holder {lag:.2f} s after bravo printed 'acquired' (want <= 1 s)")
        log(f"A: handover to bravo shown {max(lag, 0):.2f} s after it acquired")
        idx_bravo = lock_index(b, KEY)
        check(idx_bravo > idx_alpha, f"LockIndex did not grow from alpha ({idx_alpha}) to bravo ({idx_bravo})")
        b.wait(page("const t = card(arguments[0]).querySelector(`[data-term][data-lock-index='${arguments[1]}']`);"
                    "return t && t.dataset.end === 'released';"),
               f"alpha's term #{idx_alpha} with data-end=released", 5, KEY, str(idx_alpha))
        check(alpha.wait(10) is not None, "alpha (tenure lock) did not exit within 10 s of SIGTERM")

        charlie = self.lock("charlie", addr, "ui/job")
        session_shown(b, "charlie")
        bravo.p.send_signal(signal.SIGKILL)  # its session expires after 2 x TTL, then the 2 s lock-delay
        killed_at = time.monotonic()
        text = b.wait(page("const s = card(arguments[0]).querySelector('[data-field=state]');"
                           "return s.dataset.state === 'lock-delay' && s.textContent;"),
                      "[data-field=state][data-state=lock-delay] after bravo was killed", 10, KEY)
        log(f"A: lock-delay shown {time.monotonic() - killed_at:.2f} s after kill -9: {text!r}")
        check(re.fullmatch(r"lock-delay, \d+\.\d s left", text), f"lock-delay state text {text!r}")
        holder_is(b, KEY, "charlie", 10)
        self.acquired(charlie, 5)
        idx_charlie = lock_index(b, KEY)
        check(idx_charlie > idx_bravo, f"LockIndex did not grow from bravo ({idx_bravo}) to charlie ({idx_charlie})")
        log(f"A: charlie holds {KEY}; LockIndex {idx_alpha} -> {idx_bravo} -> {idx_charlie}")
        b.wait(page("const c = card(arguments[0]);"
                    "const t = c.querySelector(`[data-term][data-lock-index='${arguments[1]}']`);"
                    "const now = c.querySelector(`[data-term][data-lock-index='${arguments[2]}']`);"
                    "return t && t.dataset.end === 'ttl-expired' && now && now.dataset.end === 'held'"
                    " && !!c.querySelector('[data-gap=lock-delay]');"),
               f"bravo's term #{idx_bravo} with data-end=ttl-expired, a lock-delay gap, charlie's term held",
               5, KEY, str(idx_bravo), str(idx_charlie))
        self.timeline_to_scale(KEY)
        self.no_polling()

        b.viewport(1280, 800)
        no_horizontal_scroll(b, "1280x800")
        b.screenshot("ui.png")
        b.viewport(390, 844)
        no_horizontal_scroll(b, "390x844")
        b.screenshot("ui-phone.png")
        b.viewport(1280, 800)

        self.history_api(addr, idx_alpha, idx_bravo, idx_charlie)

    def static_files(self, addr):
        status, headers, _ = http("GET", addr + "/ui")
        check(status in (301, 308) and headers.get("Location", "").endswith("/ui/"),
              f"/ui answered {status} Location {headers.get('Location')!r}, want a redirect to /ui/")
        for path, ctype in (("/ui/", "text/html"), ("/ui/app.js", "javascript"), ("/ui/style.css", "text/css")):
            status, headers, body = http("GET", addr + path)
            check(status == 200 and body, f"{path} answered {status}")
            check(ctype in headers.get("Content-Type", ""), f"{path}: Content-Type {headers.get('Content-Type')!r}")
            # The spec's directives, exactly; more (stricter) ones may follow.
            got = headers.get("Content-Security-Policy") or ""
            directives = {d.split()[0]: d for d in (x.strip() for x in got.split(";")) if d}
            check(all(directives.get(d.split()[0]) == d for d in (x.strip() for x in CSP.split(";"))),
                  f"{path}: Content-Security-Policy {got!r} lacks {CSP!r}")

    def timeline_to_scale(self, key):
        # Segments wider than their minimum must be as wide as their share of
        # the window: width per millisecond the same for all of them.
        segs = self.browser.js(page(
            "return [...card(arguments[0]).querySelectorAll('.bar > [data-ms]')]"
            ".map(e => [e.dataset.term !== undefined ? 'term' : e.dataset.gap, +e.dataset.ms,"
            " e.getBoundingClientRect().width]);"), key)
        big = [(kind, ms, w) for kind, ms, w in segs if w >= 30 and ms > 0]
        check(len(big) >= 2, f"timeline of {key}: too few wide segments to compare: {segs}")
        rates = [w / ms for _, ms, w in big]
        check(max(rates) / min(rates) < 1.15, f"timeline of {key} is not to scale (px per ms differ): {segs}")

    def no_polling(self):
        # The page must park each feed in a blocking query: every request
        # after the first carries index= and wait=, and none repeats an index
        # (asking again without news would be polling). Once the key's
        # writes have settled (the agent may wake the feed for writes that
        # change nothing it shows), 2 s with only renewals going on must see
        # no new history request at all.
        urls = ("return performance.getEntriesByType('resource').map(e => e.name)"
                ".filter(n => n.includes('/v1/tenure/'));")
        hist = lambda: [u for u in self.browser.js(urls) if "/v1/tenure/history" in u]
        settle = time.monotonic() + 6
        count = len(hist())
        while time.monotonic() < settle:
            time.sleep(1)  # showing an absence: nothing to await
            now = len(hist())
            if now == count:
                break
            count = now
        before = len(hist())
        time.sleep(2)  # showing an absence: nothing to await
        all_urls = self.browser.js(urls)
        for feed in ("history", "sessions"):
            seen = [u for u in all_urls if f"/v1/tenure/{feed}" in u]
            check(seen, f"the page never asked /v1/tenure/{feed}")
            indexes = [re.search(r"[?&]index=(\d+)", u) for u in seen]
            later = [m for m in indexes if m]
            check(all("wait=" in u for u in seen if "index=" in u), f"{feed}: a request with index= but no wait=: {seen}")
            check(sum(1 for m in indexes if not m) <= 4, f"{feed}: many requests without index= (polling?): {seen}")
            nums = [int(m.group(1)) for m in later]
            check(len(nums) == len(set(nums)), f"{feed}: the page asked again with an index it had already used: {seen}")
        quiet = [u for u in all_urls if "/v1/tenure/history" in u][before:]
        check(len(quiet) <= 1, f"the page asked /v1/tenure/history {len(quiet)} times in 2 quiet seconds: {quiet}")

    def history_api(self, addr, idx_alpha, idx_bravo, idx_charlie):
        status, headers, body = http("GET", f"{addr}/v1/tenure/history?key={KEY}")
        check(status == 200, f"/v1/tenure/history?key={KEY} answered {status}: {body[:200]!r}")
        check(headers.get("X-Consul-Index", "").isdigit(), "/v1/tenure/history has no X-Consul-Index")
        d = json.loads(body)
        check([k["Key"] for k in d["Keys"]] == [KEY], f"history?key={KEY} keys: {[k['Key'] for k in d['Keys']]}")
        k = d["Keys"][0]
        got = [(t["LockIndex"], t["Name"], t["End"]) for t in k["Terms"]]
        want = [(idx_alpha, "alpha", "released"), (idx_bravo, "bravo", "ttl-expired"), (idx_charlie, "charlie", None)]
        check(got == want, f"history terms {got}, want {want}")
        t_b = k["Terms"][1]
        check(t_b["LockDelayUntil"] is not None and 1500 <= t_b["LockDelayUntil"] - t_b["Ended"] <= 2500,
              f"bravo's term: LockDelayUntil {t_b['LockDelayUntil']} vs Ended {t_b['Ended']}, want ~2 s later")
        check(k["Terms"][0]["LockDelayUntil"] is None, "alpha's released term started a lock-delay")
        check(k["SessionName"] == "charlie" and k["LockIndex"] == idx_charlie, f"history key now: {k}")
        for query in ("terms=abc", "bogus=1", f"key={KEY}&prefix=ui/"):
            status, _, _ = http("GET", f"{addr}/v1/tenure/history?{query}")
            check(status == 400, f"/v1/tenure/history?{query} answered {status}, want 400")
        status, _, _ = http("GET", f"{addr}/v1/tenure/sessions?key=x")
        check(status == 400, f"/v1/tenure/sessions?key=x answered {status}, want 400")
        log("A: /v1/tenure/history agrees")

    # -- B: ACLs ------------------------------------------------------------------
    def scenario_b(self):
        b = self.browser
        agent, addr = self.agent("agent-b", "-ui", "-node", "ui-acl", "-acl-enabled",
                                 "-acl-bootstrap-token", "ui-secret")
        delta = self.lock("delta", addr, "ui/acl", "-token", "ui-secret")
        self.acquired(delta)
        key = "ui/acl/.lock"
        # Without a token: 403 (ui-spec.md), or the anonymous token's view, which
        # under the default deny policy holds no keys. A bad token: 403.
        status, _, body = http("GET", addr + "/v1/tenure/history")
        check(status == 403 or (status == 200 and json.loads(body)["Keys"] == []),
              f"/v1/tenure/history without a token answered {status}: {body[:200]!r}")
        status, _, _ = http("GET", addr + "/v1/tenure/history", headers={"X-Consul-Token": "wrong"})
        check(status == 403, f"/v1/tenure/history with a bad token answered {status}, want 403")
        status, _, body = http("GET", addr + "/v1/tenure/history", headers={"X-Consul-Token": "ui-secret"})
        check(status == 200 and [k["Key"] for k in json.loads(body)["Keys"]] == [key],
              f"/v1/tenure/history with the token answered {status}: {body[:200]!r}")

        b.go(addr + "/ui/")  # another origin than agent A's: no token in sessionStorage
        form = ("const a = document.getElementById('auth'); const i = document.getElementById('token');"
                "return a && !a.hidden && i && i.type === 'password' && i.getBoundingClientRect().width > 0;")
        b.wait(form, "the ACL token form", 10)
        label = b.js("return document.querySelector('label[for=token]').textContent.trim() + '|' +"
                     " document.querySelector('#token-form button[type=submit]').textContent.trim();")
        check(label == "ACL token|Use token", f"token form label|button: {label!r}")
        check(b.js("return document.querySelectorAll('[data-key]').length;") == 0, "keys shown without a token")
        b.screenshot("ui-acl-form.png")
        log("B: token form shown, no keys")

        b.type("#token", "wrong")
        b.click("#token-form button[type=submit]")
        b.wait("return document.getElementById('auth-msg').textContent.includes('refused');",
               "the page to say that the bad token was refused", 5)
        check(b.js(form), "the token form went away after a bad token")
        check(b.js("return document.querySelectorAll('[data-key]').length;") == 0, "keys shown with a bad token")
        log("B: a bad token is refused")

        b.type("#token", "ui-secret")
        b.click("#token-form button[type=submit]")
        holder_is(b, key, "delta", 10)
        b.wait("return document.getElementById('status').dataset.state === 'live'"
               " && document.getElementById('auth').hidden;", "live status and the form gone", 5)
        stored = b.js("return sessionStorage.getItem('tenure-ui-token');")
        check(stored == "ui-secret", f"sessionStorage tenure-ui-token is {stored!r}")
        log("B: with the token, the key and its holder show")

        b.click("#forget")
        b.wait("return !document.getElementById('auth').hidden && !document.querySelector('[data-key]')"
               " && sessionStorage.getItem('tenure-ui-token') === null;",
               "the form back and the keys gone after 'Forget token'", 5)
        log("B: 'Forget token' hides the data again")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenure", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    ap.add_argument("--artifacts", required=True)
    args = ap.parse_args()
    for tool in (args.tenure, args.chromium, args.chromedriver):
        if not os.access(tool, os.X_OK):
            print(f"ui_test: {tool} is not an executable", file=sys.stderr)
            return 1
    os.makedirs(args.artifacts, exist_ok=True)
    for stale in ("failure.png", "failure.html"):  # from an earlier run
        if os.path.exists(os.path.join(args.artifacts, stale)):
            os.remove(os.path.join(args.artifacts, stale))
    # SIGTERM (and a CTest timeout's signal) ends the run through the finally block.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"ui_test: terminated"))
    run = Run(args)
    try:
        run.run()
        log("PASS")
        return 0
    except Exception as e:  # Fail, or a surprise (a traceback helps then)
        if not isinstance(e, Fail):
            import traceback
            traceback.print_exc()
        log(f"FAIL: {e}")
        run.failure_artifacts()
        for p in run.procs:
            tail = p.stderr_tail(800).strip()
            if tail:
                log(f"{p.name} stderr: {tail}")
        return 1
    finally:
        run.cleanup()


if __name__ == "__main__":
    sys.exit(main())
