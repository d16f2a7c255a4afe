// muster serve: live updates pushed by the server (server-sent events); the page never polls.
// A page made of live parts (the run page: `data-parts` names its stream) gets each part
// again only when its HTML changed, and swaps it in place. Other pages reload on a change,
// unless the person is writing in a form, in which case they only say that the store
// changed. A burst of changes (a run committing several steps) is one reload, a moment after
// the last; a page already being left never reloads, since its reload would replace the page
// the person is going to.
"use strict";
(function () {
  var typing = false;
  var leaving = false;
  var pending = null;
  document.addEventListener("input", function () { typing = true; });
  window.addEventListener("beforeunload", function () { leaving = true; });
  window.addEventListener("pagehide", function () { leaving = true; });
  var stale = document.getElementById("stale");
  var live = document.getElementById("live");
  var reload = document.getElementById("reload");
  if (reload) {
    reload.addEventListener("click", function (event) {
      event.preventDefault();
      window.location.reload();
    });
  }
  if (!window.EventSource) { return; }
  var parts = document.body.getAttribute("data-parts");
  var source = new EventSource(parts || "/events");
  source.addEventListener("open", function () {
    if (live) { live.textContent = "live"; live.className = "live"; }
  });
  source.addEventListener("error", function () {
    if (live) { live.textContent = "offline"; live.className = "live offline"; }
  });
  // A part: "ID [PARENT]\nHTML". The HTML is the server's template output (escaped there);
  // a <template> parses it inert, and the CSP forbids inline script anyway.
  source.addEventListener("part", function (event) {
    var newline = event.data.indexOf("\n");
    if (newline < 0) { return; }
    var head = event.data.slice(0, newline).split(" ");
    var template = document.createElement("template");
    template.innerHTML = event.data.slice(newline + 1);
    var node = template.content.firstElementChild;
    if (!node) { return; }
    var old = document.getElementById(head[0]);
    if (old) {
      old.replaceWith(node);
    } else if (head[1]) {
      var parent = document.getElementById(head[1]);
      if (parent) { parent.appendChild(node); }
    }
  });
  // A delta: "AGENT KIND TURN\nTEXT", a piece of what an agent's model streams on this host,
  // not yet committed. Shown as text (never parsed) in the agent's row until the committed row
  // replaces it; a discarded attempt clears it; a piece of a turn the row already holds
  // committed (it came after the row) is dropped.
  source.addEventListener("delta", function (event) {
    var newline = event.data.indexOf("\n");
    if (newline < 0) { return; }
    var head = event.data.slice(0, newline).split(" ");
    var row = document.getElementById("agent-" + head[0]);
    var doing = row && row.querySelector(".doing");
    if (!doing || Number(head[2]) <= Number(row.getAttribute("data-turns"))) { return; }
    var streaming = doing.querySelector(".streaming");
    if (!streaming) {
      streaming = document.createElement("span");
      streaming.className = "streaming";
      streaming.title = "streaming from the model, not yet committed";
      doing.appendChild(streaming);
    }
    if (head[1] === "discard") {
      streaming.textContent = "";
    } else {
      streaming.textContent += event.data.slice(newline + 1);
    }
  });
  source.addEventListener("change", function () {
    if (typing) {
      if (stale) { stale.hidden = false; }
    } else {
      if (pending) { window.clearTimeout(pending); }
      pending = window.setTimeout(function () {
        if (!leaving) { window.location.reload(); }
      }, 250);
    }
  });
})();
