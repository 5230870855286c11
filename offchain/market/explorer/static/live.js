// Live updates: an element with data-live subscribes to that server-sent event stream; each
// event carries server-rendered, escaped HTML for the element (home) or one row to append
// (timeline). Nothing the stream sends is evaluated as script.
for (const target of document.querySelectorAll("[data-live]")) {
  const source = new EventSource(target.dataset.live);
  const status = document.getElementById("live-status");
  source.addEventListener(target.dataset.event, (message) => {
    const data = JSON.parse(message.data);
    if (target.tagName === "OL") {
      const row = document.createElement("template");
      row.innerHTML = data.html.trim();
      const item = row.content.firstElementChild;
      if (!document.getElementById(item.id)) target.appendChild(item);
      const state = document.getElementById("job-state");
      if (state) state.textContent = data.state;
    } else {
      target.innerHTML = data.html;
    }
    if (status) status.textContent = "live";
  });
  source.onerror = () => { if (status) status.textContent = "reconnecting…"; };
}
