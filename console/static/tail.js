// The live tail: follows /ui/events/tail/stream (server-sent events) and
// shows each event as a line, newest first, at most 100. Text only: every
// value goes through textContent.
"use strict";
(function () {
  var list = document.getElementById("tail");
  var status = document.getElementById("tail-status");
  if (!list || !status) return;
  if (!window.EventSource) {
    status.textContent = "This browser cannot follow events; hookstream events tail can.";
    return;
  }
  var max = 100;
  var src = new EventSource("/ui/events/tail/stream" + window.location.search);
  src.addEventListener("ready", function () {
    status.textContent = "Following: new events appear here as they are committed.";
  });
  src.addEventListener("event", function (m) {
    var e = JSON.parse(m.data);
    var li = document.createElement("li");
    var t = document.createElement("time");
    t.dateTime = e.received_at;
    t.textContent = e.received_at.replace("T", " ").replace(/(\.\d+)?Z$/, " UTC");
    var a = document.createElement("a");
    a.href = e.url;
    a.textContent = e.key;
    li.append(t, " ", a, " · " + e.source + " · " + e.type);
    list.prepend(li);
    while (list.children.length > max) list.lastElementChild.remove();
  });
  src.addEventListener("end", function (m) {
    status.textContent = m.data;
    src.close();
  });
  src.onerror = function () {
    if (src.readyState === EventSource.CLOSED) status.textContent = "The tail stopped; reload to follow again.";
    else status.textContent = "Connection lost; reconnecting…";
  };
})();
