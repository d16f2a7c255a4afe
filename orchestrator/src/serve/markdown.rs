//! Plans, feedback and events are untrusted model output (DESIGN "Wave 2 → The web inbox"):
//! Markdown is rendered with raw HTML shown as text, links kept only for http(s) targets and
//! images shown as their alt text, so a plan cannot run script in the page that holds the
//! power to approve it (the page's Content-Security-Policy is the second fence).

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd, html};

/// `markdown` as HTML that carries no script, no raw HTML and no non-http(s) link.
pub fn render(markdown: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    // Whether each open link was kept, so its end is dropped with it.
    let mut links: Vec<bool> = Vec::new();
    let events = Parser::new_ext(markdown, options).filter_map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Some(Event::Text(raw)),
        Event::Start(Tag::Link {
            dest_url,
            title,
            link_type,
            id,
        }) => {
            let kept = is_web_link(&dest_url);
            links.push(kept);
            kept.then_some(Event::Start(Tag::Link {
                dest_url,
                title,
                link_type,
                id,
            }))
        }
        Event::End(TagEnd::Link) => links
            .pop()
            .unwrap_or(false)
            .then_some(Event::End(TagEnd::Link)),
        // An image would load from wherever the plan points; its alt text is enough.
        Event::Start(Tag::Image { .. }) | Event::End(TagEnd::Image) => None,
        // A plan's lines stay lines as written (a `## Files` section lists one path a line,
        // which Markdown would join into one paragraph).
        Event::SoftBreak => Some(Event::HardBreak),
        other => Some(other),
    });
    let mut out = String::new();
    html::push_html(&mut out, events);
    out
}

/// Only absolute http and https URLs stay links (no `javascript:`, `data:`, relative paths
/// or protocol-relative `//host`).
fn is_web_link(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    (lower.starts_with("http://") || lower.starts_with("https://"))
        && !lower.chars().any(|c| c.is_control() || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_plans_render_inert() {
        let cases = [
            (
                "<script>alert(1)</script>",
                "&lt;script&gt;alert(1)&lt;/script&gt;",
            ),
            (
                "x <img src=x onerror=alert(1)> y",
                "&lt;img src=x onerror=alert(1)&gt;",
            ),
            ("[click](javascript:alert(1))", "<p>click</p>"),
            ("[click](JavaScript:alert(1))", "<p>click</p>"),
            ("<javascript:alert(1)>", "<p>javascript:alert(1)</p>"),
            ("[d](data:text/html,<b>x</b>)", "<p>d</p>"),
            ("![alt](https://tracker.example/p.png)", "<p>alt</p>"),
            (
                "[ok](https://example.com/a)",
                "<a href=\"https://example.com/a\">ok</a>",
            ),
            (
                "<div onclick=\"x()\">\nhi\n</div>",
                "&lt;div onclick=\"x()\"&gt;",
            ),
        ];
        for (markdown, expected) in cases {
            let html = render(markdown);
            assert!(html.contains(expected), "{markdown:?} rendered as {html:?}");
            assert!(!html.contains("<script"), "{html}");
            assert!(!html.contains("<img"), "{html}");
            assert!(
                !html.to_ascii_lowercase().contains("href=\"javascript"),
                "{html}"
            );
        }
    }

    #[test]
    fn plan_sections_render_as_headings_and_lists() {
        let html = render("## Steps\n1. edit `a.rs`\n\n## Files\nsrc/a.rs\nsrc/b.rs\n");
        assert!(html.contains("<h2>Steps</h2>"), "{html}");
        assert!(
            html.contains("<ol>\n<li>edit <code>a.rs</code></li>"),
            "{html}"
        );
        // One path a line, as written.
        assert!(html.contains("<p>src/a.rs<br />\nsrc/b.rs</p>"), "{html}");
    }
}
