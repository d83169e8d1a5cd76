"use strict";
// Shows the citation a marker points at: the PDF page with the passage's boxes, or the
// document text with the passage marked. Everything it loads comes from this page's origin.
(function () {
  const citations = JSON.parse(document.getElementById("citations").textContent);
  const token = encodeURIComponent(document.body.dataset.token);
  const viewer = document.getElementById("viewer");
  const texts = new Map();

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function documentUrl(citation) {
    return token + "/documents/" + encodeURIComponent(citation.document_id);
  }

  function showPages(citation) {
    const span = citation.span;
    const pages = element("div", "pages");
    let first = null;
    for (let number = span.start_page; number <= span.end_page; number++) {
      const figure = element("figure", "page");
      const image = new Image();
      image.alt = "Page " + number + " of " + citation.title;
      image.src = documentUrl(citation) + "/pages/" + number + "/image?width=1000";
      figure.append(image);
      for (const box of span.boxes.filter((b) => b.page === number)) {
        const mark = element("div", "box");
        mark.style.left = box.x0 * 100 + "%";
        mark.style.top = box.y0 * 100 + "%";
        mark.style.width = (box.x1 - box.x0) * 100 + "%";
        mark.style.height = (box.y1 - box.y0) * 100 + "%";
        figure.append(mark);
        first = first || mark;
      }
      if (first && first.parentNode === figure) {
        const target = first;
        image.addEventListener("load", () => target.scrollIntoView({ block: "center" }));
      }
      pages.append(figure);
    }
    viewer.append(pages);
  }

  async function showText(citation) {
    let text = texts.get(citation.document_id);
    if (text === undefined) {
      const response = await fetch(documentUrl(citation) + "/text");
      if (!response.ok) throw new Error("the document is gone");
      text = (await response.json()).text;
      texts.set(citation.document_id, text);
    }
    const span = citation.span;
    const block = element("div", "text");
    const mark = element("mark", "", text.slice(span.start_char, span.end_char));
    block.append(text.slice(0, span.start_char), mark, text.slice(span.end_char));
    viewer.append(block);
    mark.scrollIntoView({ block: "center" });
  }

  function show(number) {
    const citation = citations[number - 1];
    if (!citation) return;
    for (const marker of document.querySelectorAll("a.cite")) {
      if (Number(marker.dataset.n) === number) marker.setAttribute("aria-current", "true");
      else marker.removeAttribute("aria-current");
    }
    viewer.replaceChildren();
    viewer.hidden = false;
    const state = citation.verified ? "" : " (unverified: not found at this place)";
    viewer.append(element("h2", "", "[" + number + "] " + citation.title + state));
    viewer.append(element("blockquote", "", citation.cited_text));
    if (!citation.span || !citation.document_id) {
      viewer.append(element("p", "", "This passage could not be located in the document."));
    } else if (citation.pages) {
      showPages(citation);
    } else {
      showText(citation).catch(() => {
        viewer.append(element("p", "", "The document could not be loaded."));
      });
    }
    viewer.focus({ preventScroll: true });
  }

  document.addEventListener("click", (event) => {
    const marker = event.target.closest("a.cite");
    if (!marker) return;
    event.preventDefault();
    show(Number(marker.dataset.n));
  });
  const opened = /^#c(\d+)$/.exec(location.hash);
  if (opened) show(Number(opened[1]));
})();
