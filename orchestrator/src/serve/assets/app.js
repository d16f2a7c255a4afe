// muster serve: live updates pushed by the server (server-sent events); the page never polls.
// On a change the page reloads itself, unless the person is writing in a form, in which case
// it only says that the store changed. A burst of changes (a run committing several steps)
// is one reload, a moment after the last; a page already being left never reloads, since its
// reload would replace the page the person is going to.
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
  var source = new EventSource("/events");
  source.addEventListener("open", function () {
    if (live) { live.textContent = "live"; live.className = "live"; }
  });
  source.addEventListener("error", function () {
    if (live) { live.textContent = "offline"; live.className = "live offline"; }
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
