/* The sequence change form's live preview: as the definition is edited, ask the admin's
 * preview endpoint (JSON) for the next numbers and show them. Nothing is issued. The endpoint
 * takes a POST with the form's CSRF token, from users who may save the definition. */
"use strict";
(function () {
  const FIELDS = [
    "name", "strategy", "options", "template", "reset",
    "step", "min_value", "max_value", "cycle", "voided", "preview_context",
  ];

  function start() {
    const box = document.getElementById("dsq-preview");
    if (!box || !window.fetch) {
      return;
    }
    let timer = null;
    let latest = 0;

    function query() {
      const q = new URLSearchParams();
      if (box.dataset.objectId) {
        q.set("object_id", box.dataset.objectId);
      }
      for (const name of FIELDS) {
        const el = document.getElementById("id_" + name);
        if (!el) {
          continue;
        }
        const value = el.type === "checkbox" ? (el.checked ? "1" : "") : el.value;
        q.set(name, value);
      }
      q.set("csrfmiddlewaretoken", csrfToken());
      return q;
    }

    // The token the admin's form carries (it works with CSRF_COOKIE_HTTPONLY and
    // CSRF_USE_SESSIONS), else Django's cookie.
    function csrfToken() {
      const field = document.querySelector("input[name=csrfmiddlewaretoken]");
      if (field && field.value) {
        return field.value;
      }
      const found = document.cookie.split(";").map(function (c) { return c.trim(); })
        .find(function (c) { return c.startsWith("csrftoken="); });
      return found ? decodeURIComponent(found.slice("csrftoken=".length)) : "";
    }

    function el(tag, cls, text) {
      const node = document.createElement(tag);
      if (cls) {
        node.className = cls;
      }
      if (text !== undefined) {
        node.textContent = text;  // never innerHTML: the template is user text
      }
      return node;
    }

    function show(data) {
      box.replaceChildren();
      if (!data.ok) {
        // a <pre> (admin.css): the caret under a bad template lines up in a monospace font
        box.appendChild(el("pre", "dsq-preview-error errornote", data.error));
        box.dataset.state = "error";
        return;
      }
      const list = el("ol", "dsq-preview-list");
      data.values.forEach(function (value, i) {
        const item = el("li");
        const number = data.numbers.length ? data.numbers[i] : value;
        item.appendChild(el("code", "dsq-number", number));
        item.appendChild(document.createTextNode(" "));
        item.appendChild(el("span", "dsq-value", "(" + value + ")"));
        list.appendChild(item);
      });
      box.appendChild(list);
      box.appendChild(el("p", "dsq-preview-note help", data.note));
      box.dataset.state = "ready";
    }

    function refresh() {
      const mine = ++latest;
      box.setAttribute("aria-busy", "true");
      box.dataset.state = "loading";
      fetch(box.dataset.url, {
        method: "POST",
        credentials: "same-origin",
        headers: { Accept: "application/json" },
        body: query(),
      })
        .then(function (response) {
          if (!response.ok) {
            throw new Error(response.status + " " + response.statusText);
          }
          return response.json();
        })
        .then(function (data) {
          if (mine === latest) {
            show(data);
          }
        })
        .catch(function (err) {
          if (mine === latest) {
            show({ ok: false, error: "Preview unavailable: " + err });
          }
        })
        .finally(function () {
          if (mine === latest) {
            box.removeAttribute("aria-busy");
          }
        });
    }

    function schedule() {
      clearTimeout(timer);
      timer = setTimeout(refresh, 250);
    }

    for (const name of FIELDS) {
      const input = document.getElementById("id_" + name);
      if (input) {
        input.addEventListener("input", schedule);
        input.addEventListener("change", schedule);
      }
    }
    box.dataset.state = "ready";
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
