// toolgate web console: the client side of /ui/ pages. No framework, no
// inline script (the CSP forbids it); every value is written with
// textContent, never as HTML. State-changing requests send the session's
// CSRF token (body data-csrf) in X-CSRF-Token.
"use strict";
(function () {
  var body = document.body;
  var csrf = body.dataset.csrf || "";
  var api = "/ui/api/v1";

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function post(path, payload) {
    return fetch(api + path, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(payload || {})
    }).then(function (r) {
      return r.text().then(function (t) {
        var j = null;
        try { j = JSON.parse(t); } catch (e) { j = { message: t }; }
        return { status: r.status, body: j };
      });
    });
  }

  // Live audit: one row per call (callId), filled by agent.toolCalled and
  // updated by agent.toolReturned.
  function audit() {
    var rows = document.getElementById("audit-rows");
    var state = document.getElementById("stream-state");
    var calls = {};
    var fTool = document.getElementById("filter-tool");
    var fStatus = document.getElementById("filter-status");
    var fPrincipal = document.getElementById("filter-principal");
    var detail = document.getElementById("audit-detail");
    var detailJSON = document.getElementById("audit-detail-json");
    document.getElementById("audit-detail-close").addEventListener("click", function () { detail.hidden = true; });

    var verdict = document.getElementById("receipt-verdict");
    var checks = document.getElementById("receipt-checks");
    var receiptJSON = document.getElementById("receipt-json");
    // showReceipt fetches the call's receipt (named by its
    // agent.toolReturned) and the gateway's verification of it.
    function showReceipt(c) {
      checks.replaceChildren();
      receiptJSON.textContent = "";
      var id = c.receiptId;
      if (!id) {
        verdict.textContent = c.status === "running" ? "(the call has not returned yet)" : "(no receipt named)";
        verdict.className = "verdict verdict-pending";
        return;
      }
      verdict.textContent = "checking…";
      verdict.className = "verdict";
      var path = api + "/receipts/" + encodeURIComponent(id);
      var opts = { credentials: "same-origin" };
      fetch(path, opts).then(function (r) {
        return r.text().then(function (t) {
          var j;
          try { j = JSON.parse(t); } catch (e) { j = t; }
          receiptJSON.textContent = r.status === 200 ? JSON.stringify(j, null, 2) : "(" + r.status + ") " + (j && j.message || t);
        });
      });
      fetch(path + "/verify", opts).then(function (r) {
        return r.json().then(function (v) { return { status: r.status, v: v }; });
      }).then(function (res) {
        if (c.receiptId !== id) return;
        var v = res.v || {};
        if (res.status !== 200) {
          verdict.textContent = "not checked (" + res.status + "): " + (v.message || "");
          verdict.className = "verdict verdict-bad";
          return;
        }
        var pending = (v.checks || []).some(function (k) { return k.skipped; });
        verdict.textContent = v.verified ? "verified" : (v.reason ? "FAILED: " + v.reason : (pending ? "not fully checked" : "not verified"));
        verdict.className = "verdict " + (v.verified ? "verdict-ok" : (v.reason ? "verdict-bad" : "verdict-pending"));
        verdict.dataset.verified = String(!!v.verified);
        (v.checks || []).forEach(function (k) {
          var li = el("li", null, "check " + (k.ok ? "check-ok" : (k.skipped ? "check-skipped" : "check-bad")));
          li.dataset.check = k.name;
          li.appendChild(el("strong", k.name + ": "));
          li.appendChild(document.createTextNode(k.detail + " (receipt seq " + v.seq + ", chain " + v.chainId + ")"));
          checks.appendChild(li);
        });
      }).catch(function () { verdict.textContent = "could not check the receipt"; verdict.className = "verdict verdict-bad"; });
    }

    function matches(c) {
      var t = fTool.value.trim(), s = fStatus.value, p = fPrincipal.value.trim();
      if (t && c.tool.indexOf(t) < 0) return false;
      if (s && c.status !== s) return false;
      if (p && c.principal !== p) return false;
      return true;
    }
    function applyFilters() {
      Object.keys(calls).forEach(function (k) { calls[k].row.hidden = !matches(calls[k]); });
    }
    [fTool, fStatus, fPrincipal].forEach(function (f) { f.addEventListener("input", applyFilters); });
    document.getElementById("audit-filters").addEventListener("submit", function (e) { e.preventDefault(); });

    function render(c) {
      var r = c.row;
      r.replaceChildren();
      r.dataset.callId = c.callId;
      r.dataset.status = c.status;
      r.dataset.tool = c.tool;
      r.appendChild(el("td", c.time));
      var t = el("td"); t.appendChild(el("code", c.tool)); r.appendChild(t);
      r.appendChild(el("td", c.principal, "principal"));
      r.appendChild(el("td", c.status, "status status-" + c.status));
      r.appendChild(el("td", (c.rule || "—") + (c.would ? " (would deny: " + c.would + ")" : ""), "rule"));
      r.appendChild(el("td", c.duration === null ? "" : c.duration + " ms", "duration"));
      r.appendChild(el("td", c.runId, "run"));
      r.hidden = !matches(c);
    }
    function call(id, ev) {
      var c = calls[id];
      if (!c) {
        c = calls[id] = { callId: id, tool: "", principal: "", status: "running", rule: "", duration: null,
          runId: ev.runId, time: (ev.timestamp || "").replace("T", " ").replace(/\..*$/, ""), events: [] };
        c.row = el("tr", null, "call");
        c.row.addEventListener("click", function () {
          detailJSON.textContent = JSON.stringify(c.events, null, 2);
          detail.hidden = false;
          showReceipt(c);
        });
        rows.insertBefore(c.row, rows.firstChild);
      }
      return c;
    }
    var es = new EventSource(api + "/events/stream");
    es.onopen = function () { state.textContent = "live"; state.className = "live"; };
    es.onerror = function () { state.textContent = "reconnecting…"; state.className = "down"; };
    es.onmessage = function (m) {
      var ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      var p = ev.payload || {};
      if (!p.callId) return;
      var c = call(p.callId, ev);
      c.events.push(ev);
      if (ev.type === "agent.toolCalled") {
        c.tool = p.toolId || p.toolName || c.tool;
        c.principal = p.principal || "";
        if (p.wouldRuleId) c.would = p.wouldRuleId;
      } else if (ev.type === "agent.toolReturned") {
        if (!c.tool) c.tool = p.toolName || "";
        c.status = p.status || "";
        if (p.receiptId) c.receiptId = p.receiptId;
        if (p.durationMs !== undefined && p.durationMs !== null) c.duration = p.durationMs;
        // The deciding rule, for every call: toolReturned's ruleId (the
        // receipt's decision.ruleId), else a refusal's error details;
        // a refusal before any rule decided shows its error code.
        if (p.ruleId) c.rule = p.ruleId;
        else if (p.error && p.error.details && p.error.details.ruleId) c.rule = p.error.details.ruleId;
        else if (p.error && p.error.code) c.rule = p.error.code;
        else c.rule = "(default)";
      }
      render(c);
    };
  }

  // Approvals: the inbox (GET /v1/approvals), refreshed every second;
  // approvers get approve/deny with a reason.
  function approvals() {
    var tbody = document.getElementById("approval-rows");
    var status = document.getElementById("approvals-status");
    var approver = body.dataset.approver === "true";
    var busy = false;
    function row(a) {
      var r = el("tr", null, "approval");
      r.dataset.approvalId = a.id;
      var t = el("td"); t.appendChild(el("code", a.toolId)); r.appendChild(t);
      r.appendChild(el("td", a.principal, "requester"));
      r.appendChild(el("td", a.requestReason || "—", "request-reason"));
      r.appendChild(el("td", a.argsSummary || "(hash " + (a.argsHash || "").slice(0, 12) + "…)", "args"));
      r.appendChild(el("td", a.createdAt));
      r.appendChild(el("td", a.expiresAt, "expires"));
      if (approver) {
        var d = el("td", null, "decide");
        var reason = el("input"); reason.placeholder = "reason"; reason.className = "reason";
        var ok = el("button", "Approve", "approve"); ok.type = "button";
        var no = el("button", "Deny", "deny"); no.type = "button";
        function decide(verb) {
          busy = true;
          post("/approvals/" + encodeURIComponent(a.id) + "/" + verb, { reason: reason.value }).then(function (res) {
            busy = false;
            status.textContent = res.status === 200 ? (verb === "approve" ? "Approved " : "Denied ") + a.id
              : "Refused (" + res.status + "): " + (res.body && res.body.message || "");
            refresh();
          });
        }
        ok.addEventListener("click", function () { decide("approve"); });
        no.addEventListener("click", function () { decide("deny"); });
        d.appendChild(reason); d.appendChild(ok); d.appendChild(no);
        r.appendChild(d);
      }
      return r;
    }
    function refresh() {
      if (busy || document.activeElement && document.activeElement.className === "reason") return;
      fetch(api + "/approvals", { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (j) {
        var list = j.approvals || [];
        tbody.replaceChildren();
        if (list.length === 0) {
          var e = el("tr"); var td = el("td", "No pending approval.", "none"); td.colSpan = 7; td.id = "approvals-empty";
          e.appendChild(td); tbody.appendChild(e);
        }
        list.forEach(function (a) { tbody.appendChild(row(a)); });
      }).catch(function () { status.textContent = "could not load the approvals"; });
    }
    refresh();
    setInterval(refresh, 1000);
  }

  // Policy: the explain form (POST /v1/policy/explain).
  function policy() {
    var form = document.getElementById("explain-form");
    var out = document.getElementById("explain-result");
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var args;
      try { args = JSON.parse(document.getElementById("explain-args").value || "{}"); }
      catch (err) { out.textContent = "arguments: " + err.message; return; }
      var req = { toolId: document.getElementById("explain-tool").value.trim(), args: args };
      var pid = document.getElementById("explain-principal").value.trim();
      if (pid) req.principal = { id: pid };
      post("/policy/explain", req).then(function (res) {
        out.dataset.status = String(res.status);
        out.textContent = JSON.stringify(res.body, null, 2);
      });
    });
  }

  var pages = { audit: audit, approvals: approvals, policy: policy };
  if (pages[body.dataset.page]) pages[body.dataset.page]();
})();
