// The dashboard's progressive enhancement (no build step): live rows over SSE, write
// forms submitted with fetch (answers in #flash), the replay panel swapped in place.
// Every page works without this file; nothing here builds HTML from event data except
// through textContent.
"use strict";

(function () {
  function $(sel, root) { return (root || document).querySelector(sel); }
  function $all(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }

  function flash(ok, text) {
    var el = $("#flash");
    if (!el) { return; }
    el.textContent = text;
    el.className = "flash " + (ok ? "ok" : "refused");
    el.setAttribute("data-ok", ok ? "true" : "false");
  }

  // -- write forms ------------------------------------------------------------------------
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!(form instanceof HTMLFormElement)) { return; }
    if (form.hasAttribute("data-write")) {
      ev.preventDefault();
      if (form.hasAttribute("data-confirm") && !window.confirm(form.getAttribute("data-confirm"))) { return; }
      submitWrite(form);
    } else if (form.hasAttribute("data-fragment")) {
      ev.preventDefault();
      var params = new URLSearchParams(new FormData(form));
      Array.from(params.keys()).forEach(function (k) { if (!params.get(k)) { params.delete(k); } });
      loadReplay(form.getAttribute("data-fragment") + "?" + params.toString(),
                 form.getAttribute("action").split("#")[0] + "?" + params.toString());
    }
  });

  // The write API takes JSON (or no body) and, from a session, the CSRF token in the
  // X-CSRF-Token header: the form's hidden fields other than csrf become the JSON body.
  function submitWrite(form) {
    var fields = new FormData(form);
    var csrf = fields.get("csrf") || "";
    var body = {};
    var any = false;
    fields.forEach(function (value, name) { if (name !== "csrf") { body[name] = value; any = true; } });
    var button = $("button", form);
    if (button) { button.disabled = true; }
    var headers = {"X-CSRF-Token": csrf, "Accept": "application/json"};
    if (any) { headers["Content-Type"] = "application/json"; }
    fetch(form.getAttribute("action"), {
      method: "POST", credentials: "same-origin", headers: headers,
      body: any ? JSON.stringify(body) : null
    }).then(function (response) {
      return response.text().then(function (text) {
        var message = text;
        try {
          var doc = JSON.parse(text);
          message = doc.detail || doc.message || doc.status || text;
        } catch (e) { /* not JSON: the text itself */ }
        flash(response.ok, response.status + " " + (response.ok ? "accepted" : "refused") +
              ": " + (button ? button.textContent : "") + " — " + message);
      });
    }).catch(function (err) {
      flash(false, "the request failed: " + err);
    }).then(function () {
      if (button) { button.disabled = false; }
    });
  }

  // -- live updates (SSE) -----------------------------------------------------------------
  // One agent followed from a version (`after`: the page's last rendered event): the server
  // first sends the events after it from the log, then the live ones, each once; on a
  // reconnection it resumes from the last one received (Last-Event-ID, or `after` again).
  function follow(ids, onAgent, after) {
    if (!ids.length || !window.EventSource) { return; }
    var url = "/ui/live?" + ids.map(function (id) { return "agent=" + encodeURIComponent(id); }).join("&");
    if (after !== undefined && after !== null) { url += "&after=" + encodeURIComponent(String(after)); }
    var state = $("#live-state");
    var source = new EventSource(url);
    source.addEventListener("open", function () {
      if (state) { state.textContent = "live"; state.setAttribute("data-live", "true"); }
    });
    source.addEventListener("error", function () {
      if (state) { state.textContent = "live: reconnecting…"; state.setAttribute("data-live", "false"); }
    });
    source.addEventListener("agent", function (ev) {
      var message;
      try { message = JSON.parse(ev.data); } catch (e) { return; }
      if (after !== undefined && after !== null && message.event && message.event.version > after) {
        after = message.event.version;
      }
      onAgent(message);
    });
    source.addEventListener("ares.closed", function () { source.close(); setTimeout(function () { follow(ids, onAgent, after); }, 1000); });
  }

  function setField(root, name, value) {
    $all('[data-field="' + name + '"]', root).forEach(function (el) {
      var span = $(".status", el);
      if (name === "status" && span) {
        span.textContent = value;
        span.className = "status s-" + value;
      } else {
        el.textContent = value === null || value === undefined ? "" : String(value);
      }
    });
  }

  function applyAgent(root, agent) {
    if (!agent || !root) { return; }
    var known = parseInt(root.getAttribute("data-version") || "0", 10);
    if (agent.version < known) { return; }
    root.setAttribute("data-status", agent.status);
    root.setAttribute("data-incarnation", String(agent.incarnation));
    root.setAttribute("data-version", String(agent.version));
    setField(root, "status", agent.status);
    setField(root, "incarnation", agent.incarnation);
    setField(root, "worker", agent.worker || "");
    setField(root, "version", agent.version);
    setField(root, "deaths", agent.deaths);
    setField(root, "resurrections", agent.resurrections);
    setField(root, "current_task", (agent.pending_tasks || [])[0] || "");
    setField(root, "step", agent.last_event_type || "");
    setField(root, "last_event", (agent.last_event_type || "") + " v" + agent.version);
    setField(root, "last_death_cause", agent.last_death_cause || "");
    if (agent.tokens) {
      setField(root, "tokens_spent", agent.tokens.spent);
      setField(root, "tokens_saved", agent.tokens.reused);
    }
    root.classList.add("updated");
    setTimeout(function () { root.classList.remove("updated"); }, 800);
  }

  function fleet() {
    var rows = {};
    $all('[data-testid="agent-row"]').forEach(function (row) { rows[row.getAttribute("data-agent-id")] = row; });
    follow(Object.keys(rows), function (message) {
      if (message.agent) { applyAgent(rows[message.agent.agent_id], message.agent); }
    });
  }

  function agentPage() {
    var summary = $('[data-testid="agent-summary"]');
    var tbody = $("#event-rows");
    if (!summary || !tbody) { return; }
    var id = summary.getAttribute("data-agent-id");
    var after = parseInt(tbody.getAttribute("data-after") || "0", 10) || 0;
    follow([id], function (message) {
      if (message.agent) { applyAgent(summary, message.agent); }
      var e = message.event;
      if (!e || $('tr[data-version="' + e.version + '"]', tbody)) { return; }
      var tr = document.createElement("tr");
      tr.setAttribute("data-testid", "event-row");
      tr.setAttribute("data-version", String(e.version));
      tr.setAttribute("data-type", e.type);
      tr.className = "fresh";
      var payload = JSON.stringify(e.payload);
      [String(e.version), e.timestamp, e.type, e.module, payload.length > 200 ? payload.slice(0, 197) + "..." : payload]
        .forEach(function (text, i) {
          var td = document.createElement("td");
          if (i === 4) { var code = document.createElement("code"); code.textContent = text; td.appendChild(code); }
          else { td.textContent = text; }
          tr.appendChild(td);
        });
      tbody.insertBefore(tr, tbody.firstChild);
      var head = $("#head-version");
      if (head && e.version > parseInt(head.textContent || "0", 10)) { head.textContent = String(e.version); }
      var replay = $("#replay");
      if (replay) { replay.setAttribute("data-head", String(e.version)); }
      if (e.type.indexOf("agent.") === 0) { refreshGenealogy(e.version); }
    }, after);
  }

  // The genealogy after a lifecycle event (death, resurrection, stop...): its fragment
  // re-fetched until it reflects that event (the projection it is read from may lag).
  var genealogyWanted = 0, genealogyTimer = null;
  function refreshGenealogy(version) {
    genealogyWanted = Math.max(genealogyWanted, version);
    if (genealogyTimer === null) { genealogyTimer = setTimeout(function () { loadGenealogy(20); }, 200); }
  }
  function loadGenealogy(tries) {
    var old = $("#genealogy");
    if (!old) { genealogyTimer = null; return; }
    var wanted = genealogyWanted;
    fetch(old.getAttribute("data-fragment"), {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) { return response.ok ? response.text() : ""; })
      .then(function (text) {
        var holder = document.createElement("div");
        holder.innerHTML = text;
        var fresh = $("#genealogy", holder);
        var seen = fresh ? parseInt(fresh.getAttribute("data-version") || "0", 10) : 0;
        var current = $("#genealogy");
        if (fresh && current && seen >= parseInt(current.getAttribute("data-version") || "0", 10)) {
          current.replaceWith(fresh);
        }
        if ((seen < wanted || genealogyWanted > wanted) && tries > 1) {
          genealogyTimer = setTimeout(function () { loadGenealogy(tries - 1); }, 500);
        } else { genealogyTimer = null; }
      })
      .catch(function () { genealogyTimer = null; });
  }

  // -- replay panel -----------------------------------------------------------------------
  function loadReplay(fragmentUrl, pageUrl) {
    fetch(fragmentUrl, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        return response.text().then(function (text) {
          if (!response.ok) { flash(false, response.status + " " + text.replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim().slice(0, 300)); return; }
          var holder = document.createElement("div");
          holder.innerHTML = text;
          var fresh = $("#replay", holder);
          var old = $("#replay");
          if (fresh && old) { old.replaceWith(fresh); }
          if (pageUrl && window.history && history.replaceState) { history.replaceState(null, "", pageUrl + "#replay"); }
        });
      })
      .catch(function (err) { flash(false, "the replay failed: " + err); });
  }

  document.addEventListener("click", function (ev) {
    var link = ev.target instanceof Element ? ev.target.closest("#replay a[data-fragment]") : null;
    if (!link) { return; }
    ev.preventDefault();
    loadReplay(link.getAttribute("data-fragment"), link.getAttribute("href").split("#")[0]);
  });

  function audit() {
    var panel = $("#audit-panel");
    if (!panel) { return; }
    fetch(panel.getAttribute("data-fragment"), {credentials: "same-origin"})
      .then(function (response) { return response.text().then(function (text) {
        var holder = document.createElement("div");
        holder.innerHTML = text;
        var result = $('[data-testid="audit-result"]', holder);
        panel.textContent = "";
        if (result) { panel.appendChild(result); } else { panel.textContent = "audit: " + response.status; }
      }); })
      .catch(function (err) { panel.textContent = "audit failed: " + err; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var page = document.body.getAttribute("data-page");
    if (page === "fleet") { fleet(); }
    if (page === "agent") { agentPage(); audit(); }
  });
})();
