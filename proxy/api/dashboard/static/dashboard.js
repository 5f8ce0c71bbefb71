// cdn-proxy dashboard: the only script. Everything works without it; it adds two things.
//
// 1. Destructive forms (data-confirm) ask first, in the page's <dialog>. Without this script
//    they post directly, still guarded by the CSRF token the server checks.
// 2. The copy button next to a new token.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const dialog = document.getElementById("confirm-dialog");
  let pending = null;

  if (dialog) {
    for (const form of document.querySelectorAll("form[data-confirm]")) {
      form.addEventListener("submit", (event) => {
        if (form.dataset.confirmed === "yes") {
          return;
        }
        event.preventDefault();
        pending = form;
        dialog.returnValue = "";
        document.getElementById("confirm-message").textContent = form.dataset.confirm;
        dialog.showModal();
      });
    }
    dialog.addEventListener("close", () => {
      const form = pending;
      pending = null;
      if (form && dialog.returnValue === "confirm") {
        form.dataset.confirmed = "yes";
        form.requestSubmit();
      }
    });
  }

  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      try {
        await navigator.clipboard.writeText(source.textContent.trim());
        button.textContent = "Copied";
      } catch {
        // No clipboard access (an insecure context, a denied permission): select the token
        // so that Ctrl+C copies it.
        window.getSelection().selectAllChildren(source);
        button.textContent = "Press Ctrl+C";
      }
    });
  }
});
