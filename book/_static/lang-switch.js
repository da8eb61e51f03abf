// The switch between the book's two editions: English at the site's root, Chinese under
// zh/ (scripts/build_book.py). Every page links to the same page, at the same place (the
// Chinese edition keeps the English anchors), in the other edition.
document.addEventListener("DOMContentLoaded", () => {
  const html = document.documentElement;
  const zh = (html.lang || "").toLowerCase().startsWith("zh");
  // this edition's root, from the relative root Sphinx writes on <html>
  const root = new URL(html.dataset.content_root || "./", window.location.href);
  const here = new URL(window.location.href);
  here.hash = "";
  here.search = "";
  if (!here.href.startsWith(root.href)) return;
  let page = here.href.slice(root.href.length);
  if (page === "" || page.endsWith("/")) page += "index.html";
  const target = new URL((zh ? "../" : "zh/") + page, root);
  target.hash = window.location.hash;
  const link = document.createElement("a");
  link.className = "btn btn-sm lang-switch";
  link.href = target.href;
  link.hreflang = zh ? "en" : "zh-CN";
  link.lang = zh ? "en" : "zh-CN";
  link.textContent = zh ? "English" : "中文";
  link.title = zh ? "Read this page in English" : "阅读本页的中文版";
  const bar = document.querySelector(".article-header-buttons");
  if (bar) bar.prepend(link);
  else document.body.prepend(link);
  // keep the place: the anchor follows the reader as they scroll to a section
  window.addEventListener("hashchange", () => { target.hash = window.location.hash;
                                                 link.href = target.href; });
});
