// The console's live updates: the state over server-sent events, the
// actions without a page reload, and a running job's output as it is
// written. Without this script the page still works, by forms and reloads.
"use strict";

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  return e;
}

function action(url, label) {
  const f = el("form", undefined, { method: "post", action: url, "data-action": "" });
  f.appendChild(el("button", label));
  return f;
}

function time(s) {
  return s && !s.startsWith("0001") ? new Date(s).toLocaleTimeString() : "";
}

function rows(id, items, cells) {
  const body = document.querySelector("#" + id + " tbody");
  if (!body) return;
  body.replaceChildren(...items.map((item) => {
    const tr = el("tr");
    for (const c of cells(item)) {
      const td = el("td");
      if (c instanceof Node) td.appendChild(c);
      else td.textContent = c;
      tr.appendChild(td);
    }
    return tr;
  }));
}

function link(id) {
  return el("a", id, { href: "/jobs/" + encodeURIComponent(id) });
}

function jobLinks(ids) {
  const span = el("span");
  ids.forEach((id, i) => {
    if (i) span.append(", ");
    span.appendChild(link(id));
  });
  return span;
}

function code(s) {
  return el("code", s);
}

function show(st) {
  document.getElementById("running-count").textContent = st.running.length;
  document.getElementById("parallelism").textContent = st.parallelism;
  document.getElementById("pool").textContent = st.pool_size;
  document.getElementById("queued-count").textContent = st.queued_count;
  const conc = document.getElementById("concurrency");
  if (document.activeElement !== conc) conc.value = st.concurrency;
  const counts = Object.keys(st.counts).sort().map((k) => st.counts[k] + " " + k).join(" · ");
  let rate = st.rate > 0 ? st.rate.toFixed(st.rate < 10 ? 2 : 0) + " jobs/s" : "";
  if (st.eta >= 0 && st.queued_count + st.running.length > 0) rate += ", done in about " + Math.ceil(st.eta) + " s";
  document.getElementById("rate").textContent = [counts, rate].filter(Boolean).join(" · ");
  rows("running", st.running, (j) => [link(j.id), code(j.command), j.worker || j.pid || "", time(j.started),
    action("/jobs/" + encodeURIComponent(j.id) + "/cancel", "Cancel")]);
  rows("queued", st.queued, (j) => [j.id, code(j.command), action("/jobs/" + encodeURIComponent(j.id) + "/stop", "Stop")]);
  rows("workers", st.workers, (w) => [w.name, w.running.length + " of " + w.slots, jobLinks(w.running)]);
  rows("batches", st.batches, (b) => [b.name, b.jobs, b.succeeded, b.failed, b.cancelled, time(b.submitted),
    time(b.ended) || "running"]);
  rows("finished", st.finished, (j) => [link(j.id), code(j.command), j.status, j.exit, time(j.ended), code(j.stderr || "")]);
}

// Actions go by fetch, so that the page stays; a refusal is shown.
document.addEventListener("submit", async (ev) => {
  const form = ev.target;
  if (!form.hasAttribute("data-action")) return;
  ev.preventDefault();
  const res = await fetch(form.action, {
    method: "POST", body: new URLSearchParams(new FormData(form)),
    headers: { "X-Requested-With": "console" }, credentials: "same-origin",
  });
  if (!res.ok) alert(await res.text());
});

if (document.getElementById("running")) {
  const events = new EventSource("/api/events");
  events.addEventListener("state", (ev) => show(JSON.parse(ev.data)));
}

const out = document.getElementById("output");
if (out && out.dataset.follow === "true") {
  const stream = new EventSource("/jobs/" + encodeURIComponent(out.dataset.job) + "/output");
  stream.addEventListener("output", (ev) => {
    out.append(JSON.parse(ev.data));
    out.scrollTop = out.scrollHeight;
  });
  stream.addEventListener("end", (ev) => {
    const why = JSON.parse(ev.data);
    document.getElementById("output-end").textContent = why ? why : "(the job ended)";
    stream.close();
  });
}
