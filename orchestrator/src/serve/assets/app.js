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
      keepStreamed(old, node);
      old.replaceWith(node);
    } else if (head[1]) {
      var parent = document.getElementById(head[1]);
      if (parent) { parent.appendChild(node); }
    }
  });
  // An agent's row rendered before the page took its newest pieces (parts and deltas are two
  // streams: either may come first) would drop them: the row keeps what the page streamed
  // when that is more of a turn not yet committed.
  function keepStreamed(old, node) {
    var kept = old.querySelector(".doing .streaming");
    var doing = node.querySelector(".doing");
    if (!kept || !doing) { return; }
    var turn = Number(kept.getAttribute("data-turn"));
    if (turn <= Number(node.getAttribute("data-turns"))) { return; }
    var fresh = doing.querySelector(".streaming");
    if (fresh) {
      var freshTurn = Number(fresh.getAttribute("data-turn"));
      if (freshTurn > turn || (freshTurn === turn &&
          Number(fresh.getAttribute("data-pieces")) >= Number(kept.getAttribute("data-pieces")))) {
        return;
      }
      fresh.remove();
    }
    doing.appendChild(kept);
  }
  // A delta: "AGENT KIND TURN PIECE\nTEXT", a piece of what an agent's model streams on this
  // host, not yet committed. Shown as text (never parsed) in the agent's row until the
  // committed row replaces it; a discarded attempt clears it; a piece of a turn the row
  // already holds committed (it came after the row) is dropped. A row the server rendered
  // mid-stream holds the turn's first `data-pieces` pieces already, so those are not added
  // again.
  source.addEventListener("delta", function (event) {
    var newline = event.data.indexOf("\n");
    if (newline < 0) { return; }
    var head = event.data.slice(0, newline).split(" ");
    var row = document.getElementById("agent-" + head[0]);
    var doing = row && row.querySelector(".doing");
    if (!doing || Number(head[2]) <= Number(row.getAttribute("data-turns"))) { return; }
    var piece = Number(head[3]);
    var streaming = doing.querySelector(".streaming");
    if (streaming && streaming.getAttribute("data-turn") !== head[2]) {
      streaming.remove();
      streaming = null;
    }
    if (!streaming) {
      streaming = document.createElement("span");
      streaming.className = "streaming";
      streaming.title = "streaming from the model, not yet committed";
      streaming.setAttribute("data-turn", head[2]);
      streaming.setAttribute("data-pieces", "0");
      doing.appendChild(streaming);
    }
    if (piece < Number(streaming.getAttribute("data-pieces"))) { return; }
    if (head[1] === "discard") {
      streaming.textContent = "";
    } else {
      streaming.textContent += event.data.slice(newline + 1);
    }
    streaming.setAttribute("data-pieces", String(piece + 1));
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
