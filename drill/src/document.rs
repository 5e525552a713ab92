//! The report as a small document — a title, headings, paragraphs, lists,
//! tables and charts — and its two renderings: Markdown (`report.md`, charts
//! as image links to their SVG files) and a self-contained HTML page
//! (`report.html`, charts inlined, every text escaped). Writing the report
//! once as a document keeps the two files saying the same thing.

use std::fmt::Write as _;

/// One drawn chart: the SVG document and the file it is written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    pub file_name: &'static str,
    pub title: &'static str,
    pub svg: String,
}

/// A run of text with one emphasis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Span {
    Text(String),
    Strong(String),
    Code(String),
}

/// Inline text: one paragraph, list item or table cell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Line(pub Vec<Span>);

impl Line {
    pub fn text(self, text: impl Into<String>) -> Self {
        self.with(Span::Text(text.into()))
    }

    pub fn strong(self, text: impl Into<String>) -> Self {
        self.with(Span::Strong(text.into()))
    }

    pub fn code(self, text: impl Into<String>) -> Self {
        self.with(Span::Code(text.into()))
    }

    fn with(mut self, span: Span) -> Self {
        self.0.push(span);
        self
    }
}

impl From<String> for Line {
    fn from(text: String) -> Self {
        Line::default().text(text)
    }
}

impl From<&str> for Line {
    fn from(text: &str) -> Self {
        Line::default().text(text)
    }
}

/// A list item and the items nested under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub line: Line,
    pub nested: Vec<Line>,
}

impl From<Line> for Item {
    fn from(line: Line) -> Self {
        Item {
            line,
            nested: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A section heading (below the title).
    Heading(String),
    Paragraph(Line),
    List(Vec<Item>),
    Table {
        head: Vec<Line>,
        rows: Vec<Vec<Line>>,
    },
    Chart(Chart),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Document {
    pub title: String,
    pub blocks: Vec<Block>,
}

impl Document {
    pub fn new(title: impl Into<String>) -> Self {
        Document {
            title: title.into(),
            blocks: Vec::new(),
        }
    }

    pub fn push(&mut self, block: Block) {
        self.blocks.push(block);
    }

    /// Markdown; a chart is an image link to its SVG file beside it.
    pub fn markdown(&self) -> String {
        let mut md = format!("# {}\n", self.title);
        for block in &self.blocks {
            md.push('\n');
            match block {
                Block::Heading(text) => {
                    let _ = writeln!(md, "## {text}");
                }
                Block::Paragraph(line) => {
                    let _ = writeln!(md, "{}", markdown_line(line));
                }
                Block::List(items) => {
                    for item in items {
                        let _ = writeln!(md, "- {}", markdown_line(&item.line));
                        for nested in &item.nested {
                            let _ = writeln!(md, "  - {}", markdown_line(nested));
                        }
                    }
                }
                Block::Table { head, rows } => {
                    let row = |cells: &[Line]| {
                        let cells: Vec<String> = cells.iter().map(markdown_line).collect();
                        format!("| {} |", cells.join(" | "))
                    };
                    let _ = writeln!(md, "{}", row(head));
                    let _ = writeln!(md, "|{}", "---|".repeat(head.len()));
                    for cells in rows {
                        let _ = writeln!(md, "{}", row(cells));
                    }
                }
                Block::Chart(chart) => {
                    let _ = writeln!(md, "![{}]({})", chart.title, chart.file_name);
                }
            }
        }
        md
    }

    /// A self-contained HTML page: the charts' SVG inline, the style in the
    /// page, nothing loaded from elsewhere and no script.
    pub fn html(&self) -> String {
        let title = escape(&self.title);
        let mut html = format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n\
             <h1>{title}</h1>\n"
        );
        let mut in_section = false;
        for block in &self.blocks {
            match block {
                Block::Heading(text) => {
                    if in_section {
                        html.push_str("</section>\n");
                    }
                    in_section = true;
                    let _ = writeln!(html, "<section>\n<h2>{}</h2>", escape(text));
                }
                Block::Paragraph(line) => {
                    let _ = writeln!(html, "<p>{}</p>", html_line(line));
                }
                Block::List(items) => {
                    html.push_str("<ul>\n");
                    for item in items {
                        let _ = write!(html, "<li>{}", html_line(&item.line));
                        if !item.nested.is_empty() {
                            html.push_str("\n<ul>\n");
                            for nested in &item.nested {
                                let _ = writeln!(html, "<li>{}</li>", html_line(nested));
                            }
                            html.push_str("</ul>\n");
                        }
                        html.push_str("</li>\n");
                    }
                    html.push_str("</ul>\n");
                }
                Block::Table { head, rows } => {
                    html.push_str("<table>\n<thead><tr>");
                    for cell in head {
                        let _ = write!(html, "<th scope=\"col\">{}</th>", html_line(cell));
                    }
                    html.push_str("</tr></thead>\n<tbody>\n");
                    for cells in rows {
                        html.push_str("<tr>");
                        for cell in cells {
                            let _ = write!(html, "<td>{}</td>", html_line(cell));
                        }
                        html.push_str("</tr>\n");
                    }
                    html.push_str("</tbody>\n</table>\n");
                }
                Block::Chart(chart) => {
                    // The SVG is plotters' output, which escapes its text.
                    let _ = writeln!(
                        html,
                        "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>",
                        chart.svg,
                        escape(chart.title)
                    );
                }
            }
        }
        if in_section {
            html.push_str("</section>\n");
        }
        html.push_str("</main>\n</body>\n</html>\n");
        html
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:70rem;\
padding:0 1rem;line-height:1.4;color:#1a1a1a}\
table{border-collapse:collapse;margin:.5rem 0}\
th,td{border:1px solid #bbb;padding:.2rem .6rem;text-align:left}\
th{background:#f0f0f0}code{background:#f4f4f4;padding:0 .2rem;word-break:break-all}\
figure{margin:1rem 0}figure svg{max-width:100%;height:auto}\
figcaption{font-size:.9rem;color:#555}";

fn markdown_line(line: &Line) -> String {
    line.0
        .iter()
        .map(|span| match span {
            Span::Text(text) => text.clone(),
            Span::Strong(text) => format!("**{text}**"),
            Span::Code(text) => format!("`{text}`"),
        })
        .collect()
}

fn html_line(line: &Line) -> String {
    line.0
        .iter()
        .map(|span| match span {
            Span::Text(text) => escape(text),
            Span::Strong(text) => format!("<strong>{}</strong>", escape(text)),
            Span::Code(text) => format!("<code>{}</code>", escape(text)),
        })
        .collect()
}

/// `text` safe in HTML element content and in quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> Document {
        let mut doc = Document::new("Drill <eu> & co");
        doc.push(Block::Heading("Checks".into()));
        doc.push(Block::List(vec![Item {
            line: Line::default().strong("FAIL").text(" replay <I2>"),
            nested: vec![Line::default().text("key: ").code("{\"a\":\"<b>\"}")],
        }]));
        doc.push(Block::Table {
            head: vec!["answer".into(), "attempts".into()],
            rows: vec![vec!["503 <x>".into(), "2".into()]],
        });
        doc
    }

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape(r#"<a href="x">Tom & 'Jerry'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn html_escapes_every_text_and_nests_lists_and_tables() {
        let html = document().html();
        assert!(
            html.contains("<title>Drill &lt;eu&gt; &amp; co</title>"),
            "{html}"
        );
        assert!(
            html.contains("<li><strong>FAIL</strong> replay &lt;I2&gt;\n<ul>\n<li>key: <code>{&quot;a&quot;:&quot;&lt;b&gt;&quot;}</code></li>"),
            "{html}"
        );
        assert!(html.contains("<td>503 &lt;x&gt;</td><td>2</td>"), "{html}");
        assert!(!html.contains("<x>") && !html.contains("<b>"), "{html}");
        assert_eq!(html.matches("<section>").count(), 1);
        assert_eq!(html.matches("</section>").count(), 1);
        assert!(!html.contains("<script"), "{html}");
    }

    #[test]
    fn markdown_keeps_the_reports_layout() {
        assert_eq!(
            document().markdown(),
            "# Drill <eu> & co\n\n## Checks\n\n- **FAIL** replay <I2>\n  - key: `{\"a\":\"<b>\"}`\n\n\
             | answer | attempts |\n|---|---|\n| 503 <x> | 2 |\n"
        );
    }
}
