//! A fast reader for the YAML most manifests are: block mappings and sequences, one-line plain
//! and quoted scalars, one-line flow collections, literal block scalars, comments and `---`.
//!
//! It gives the same events, with the same root lines, as libyaml gives for the texts it takes,
//! and gives up (`Bail`) on anything else, early or late: tabs, carriage returns and any byte
//! outside printable ASCII, escapes, multi-line scalars and flows, folded scalars, anchors,
//! aliases, tags, complex keys, JSON's `"a":1`, a root that is not a block collection, and any
//! line at column 0 that starts with `...` or `%`, or with `---` and content (`libyaml_line`). The caller then reads the text with libyaml. Giving up is always safe; a wrong
//! acceptance is not, so every case here is the narrow one, and the tests compare both readers
//! (and PyYAML's careful loader) on generated texts.

use std::borrow::Cow;

/// One event, as the builder needs it.
pub enum Ev<'t> {
    /// A scalar: its bytes, and whether it is plain (so a resolver may read it).
    Scalar {
        bytes: Cow<'t, [u8]>,
        plain: bool,
        line: usize,
    },
    MapStart {
        line: usize,
    },
    SeqStart {
        line: usize,
    },
    End,
    /// The anchor of the node whose event comes next (libyaml's events only: this scanner
    /// leaves anchors to libyaml).
    Anchor(Vec<u8>),
    /// An alias (libyaml's events only).
    Alias(Vec<u8>),
}

/// This text is left to libyaml.
pub struct Bail;

type R<T> = Result<T, Bail>;

/// Nesting past this is left to libyaml (and refused by the builder's own, lower, limit); the
/// scanner recurses, so this bounds its stack whatever the text.
const MAX_NESTING: usize = 512;

/// The longest key taken here, from its first character to its `:`, in block and flow mappings
/// alike: libyaml takes a key only when its `:` is at most 1024 characters after the key's start
/// (past that, `{long...: v}` is an error, "did not find expected ',' or '}'"); longer ones
/// are libyaml's.
const MAX_KEY: usize = 1000;

/// One line of the text: where it starts, its indentation, and where its content ends.
#[derive(Clone, Copy)]
struct Line {
    start: usize,
    indent: usize,
    end: usize, // exclusive, without the line break
}

pub struct Scanner<'t> {
    text: &'t [u8],
    lines: Vec<Line>,
    /// The next line to read.
    at: usize,
    /// The events of every document, in order; a root's first event carries its line.
    pub events: Vec<Ev<'t>>,
    /// Open collections.
    depth: usize,
}

fn is_blank_or_comment(text: &[u8], line: &Line) -> bool {
    line.start + line.indent == line.end || text[line.start + line.indent] == b'#'
}

impl<'t> Scanner<'t> {
    /// Split `text` into lines, refusing what this reader never reads.
    pub fn new(text: &'t [u8]) -> R<Scanner<'t>> {
        if text.last().is_some_and(|b| *b != b'\n') {
            return Err(Bail); // a last line without its break: libyaml's marks differ there
        }
        let mut lines = Vec::with_capacity(text.len() / 24);
        let mut start = 0;
        while start < text.len() {
            let mut indent = 0;
            while text[start + indent] == b' ' {
                indent += 1;
            }
            let mut end = start + indent;
            loop {
                let b = text[end];
                if b == b'\n' {
                    break;
                }
                if !(0x20..0x7f).contains(&b) {
                    return Err(Bail); // tabs, \r, control characters, anything not ASCII
                }
                end += 1;
            }
            if indent == 0 && libyaml_line(&text[start..end]) {
                return Err(Bail);
            }
            lines.push(Line { start, indent, end });
            start = end + 1;
        }
        Ok(Scanner {
            text,
            lines,
            at: 0,
            events: Vec::new(),
            depth: 0,
        })
    }

    /// The whole stream: documents separated by `---` lines.
    pub fn run(&mut self) -> R<()> {
        let mut explicit = false; // the document began with `---`
        loop {
            self.skip_blank();
            if self.at == self.lines.len() {
                if explicit {
                    // an empty document at the end: its null is marked at the stream's end
                    self.empty_document(self.lines.len());
                }
                return Ok(());
            }
            let line = self.lines[self.at];
            if self.is_document_start(&line) {
                trailing(self.rest(&line, 3))?; // `--- |`, `--- {a: 1}`: libyaml's
                self.at += 1;
                if explicit {
                    self.empty_document(self.at - 1);
                }
                explicit = true;
                continue;
            }
            if line.indent != 0 {
                return Err(Bail); // an indented root
            }
            self.block_collection()?;
            self.skip_blank();
            if self.at < self.lines.len() && !self.is_document_start(&self.lines[self.at]) {
                return Err(Bail); // something after the root that is not a new document
            }
            explicit = false;
        }
    }

    /// An explicit document with nothing in it: a null, marked where the next token is.
    fn empty_document(&mut self, line_index: usize) {
        self.events.push(Ev::Scalar {
            bytes: Cow::Borrowed(b""),
            plain: true,
            line: line_index + 1,
        });
    }

    /// `---` at the start of a line, alone or before a space: where a new document starts (and
    /// every open block ends), whatever follows it.
    fn is_document_start(&self, line: &Line) -> bool {
        line.indent == 0 && {
            let rest = &self.text[line.start..line.end];
            rest.starts_with(b"---") && rest.get(3).is_none_or(|b| *b == b' ')
        }
    }

    fn rest(&self, line: &Line, column: usize) -> &'t [u8] {
        &self.text[line.start + column..line.end]
    }

    fn skip_blank(&mut self) {
        while self.at < self.lines.len() && is_blank_or_comment(self.text, &self.lines[self.at]) {
            self.at += 1;
        }
    }

    /// The next line with content, if its indentation is more than `than`.
    fn deeper(&mut self, than: usize) -> Option<Line> {
        self.skip_blank();
        let line = *self.lines.get(self.at)?;
        (line.indent > than && !self.is_document_start(&line)).then_some(line)
    }

    /// A block mapping or sequence whose first line is the next line, at its indentation.
    fn block_collection(&mut self) -> R<()> {
        let line = self.lines[self.at];
        if is_entry(self.rest(&line, line.indent)) {
            self.sequence(line.indent)
        } else {
            self.mapping(line.indent)
        }
    }

    /// A block sequence whose entries' `-` are at `indent`, the first on the next line (a
    /// sequence that is an entry of another, `- - x`, is left to libyaml).
    fn sequence(&mut self, indent: usize) -> R<()> {
        self.open()?;
        self.events.push(Ev::SeqStart { line: self.at + 1 });
        loop {
            self.skip_blank();
            let Some(line) = self.lines.get(self.at).copied() else {
                break;
            };
            if self.is_document_start(&line) || line.indent < indent {
                break;
            }
            let rest = self.rest(&line, line.indent);
            if line.indent > indent {
                return Err(Bail);
            }
            if !is_entry(rest) {
                break; // a key of the mapping this sequence is a value of
            }
            // after `-`: spaces, then the entry's content, if any, on this line
            let mut column = line.indent + 1;
            while column < line.end - line.start && self.text[line.start + column] == b' ' {
                column += 1;
            }
            let content = self.rest(&line, column);
            if content.is_empty() || content[0] == b'#' {
                self.at += 1;
                self.nested_or_null(indent)?;
            } else if content[0] == b'-' && content.get(1).is_none_or(|b| *b == b' ') {
                return Err(Bail); // `- - x`
            } else if key_end(content)?.is_some() {
                self.mapping_at(column, line)?;
            } else {
                self.value(&line, column, indent)?;
            }
        }
        self.events.push(Ev::End);
        self.depth -= 1;
        Ok(())
    }

    fn open(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(Bail);
        }
        Ok(())
    }

    /// A block mapping whose keys are at `column`, starting at the next line.
    fn mapping(&mut self, column: usize) -> R<()> {
        let line = self.lines[self.at];
        self.mapping_at(column, line)
    }

    /// A block mapping whose first key is on `first` at `column` (a compact mapping in a
    /// sequence entry starts mid-line); the following keys are at the same column.
    fn mapping_at(&mut self, column: usize, first: Line) -> R<()> {
        self.open()?;
        self.events.push(Ev::MapStart { line: self.at + 1 });
        let mut line = first;
        let mut key_column = column;
        loop {
            let content = self.rest(&line, key_column);
            let Some(colon) = key_end(content)? else {
                return Err(Bail); // a line in a mapping that is not a key
            };
            self.key(&content[..colon], self.at + 1)?;
            // after `:`, spaces, then the value's content, if any, on this line
            let mut value_column = key_column + colon + 1;
            let width = line.end - line.start;
            if value_column < width && self.text[line.start + value_column] != b' ' {
                return Err(Bail);
            }
            while value_column < width && self.text[line.start + value_column] == b' ' {
                value_column += 1;
            }
            let value = self.rest(&line, value_column);
            if value.is_empty() || value[0] == b'#' {
                self.at += 1;
                // a sequence may sit at its key's own column
                self.skip_blank();
                match self.lines.get(self.at).copied() {
                    Some(next)
                        if next.indent == column
                            && !self.is_document_start(&next)
                            && is_entry(self.rest(&next, next.indent)) =>
                    {
                        self.sequence(column)?
                    }
                    _ => self.nested_or_null(column)?,
                }
            } else {
                self.value(&line, value_column, column)?;
            }
            // the next key, at this column
            self.skip_blank();
            let Some(next) = self.lines.get(self.at).copied() else {
                break;
            };
            if self.is_document_start(&next) || next.indent < column {
                break;
            }
            if next.indent > column || is_entry(self.rest(&next, next.indent)) {
                return Err(Bail);
            }
            line = next;
            key_column = next.indent;
        }
        self.events.push(Ev::End);
        self.depth -= 1;
        Ok(())
    }

    /// What follows a key or `-` with nothing after it on its line: a block collection on the
    /// next lines, deeper than `indent`, or a null.
    fn nested_or_null(&mut self, indent: usize) -> R<()> {
        match self.deeper(indent) {
            Some(line) => {
                let rest = self.rest(&line, line.indent);
                if is_entry(rest) {
                    self.sequence(line.indent)
                } else if key_end(rest)?.is_some() {
                    self.mapping(line.indent)
                } else {
                    Err(Bail) // a scalar on the next line
                }
            }
            None => {
                // the null's mark is where the next token is; only its value is read here
                self.events.push(Ev::Scalar {
                    bytes: Cow::Borrowed(b""),
                    plain: true,
                    line: 0,
                });
                Ok(())
            }
        }
    }

    /// A value that starts on `line` at `column` and ends on it (a literal block scalar runs
    /// on); what comes next must not be deeper than `indent`.
    fn value(&mut self, line: &Line, column: usize, indent: usize) -> R<()> {
        let content = self.rest(line, column);
        match content[0] {
            b'|' => return self.literal(content, indent),
            b'"' | b'\'' => {
                let (bytes, used) = quoted(content)?;
                trailing(&content[used..])?;
                self.events.push(Ev::Scalar {
                    bytes,
                    plain: false,
                    line: 0,
                });
            }
            b'[' | b'{' => {
                let depth = self.depth;
                let mut flow = Flow {
                    text: content,
                    at: 0,
                    events: &mut self.events,
                    depth,
                };
                flow.node()?;
                let used = flow.at;
                trailing(&content[used..])?;
            }
            _ => {
                let plain = plain_block(content)?;
                self.events.push(Ev::Scalar {
                    bytes: Cow::Borrowed(plain),
                    plain: true,
                    line: 0,
                });
            }
        }
        self.at += 1;
        if self.deeper(indent).is_some() {
            return Err(Bail); // a multi-line scalar, or worse
        }
        Ok(())
    }

    /// `|`, `|-` or `|+` (with an optional comment), then the lines deeper than `indent`.
    fn literal(&mut self, header: &'t [u8], indent: usize) -> R<()> {
        let chomp = match header.get(1) {
            None | Some(b' ') => b' ',
            Some(b'-') => b'-',
            Some(b'+') => b'+',
            _ => return Err(Bail), // an indentation indicator, or something else
        };
        let after = if chomp == b' ' { 1 } else { 2 };
        trailing(&header[after..])?;
        self.at += 1;
        // the first line decides the content's indentation: it must have content
        let Some(first) = self.lines.get(self.at).copied() else {
            return Err(Bail);
        };
        if first.indent <= indent || first.start + first.indent == first.end {
            return Err(Bail); // empty, or leading blank lines
        }
        let width = first.indent;
        let mut out: Vec<u8> = Vec::new();
        let mut breaks = 0usize; // line breaks not yet written (after the last content line)
        while let Some(line) = self.lines.get(self.at).copied() {
            let blank = line.start + line.indent == line.end;
            if blank {
                if line.indent > width {
                    return Err(Bail); // spaces past the indentation on an empty line
                }
                breaks += 1;
                self.at += 1;
                continue;
            }
            if line.indent < width {
                break;
            }
            if !out.is_empty() || breaks > 0 {
                out.extend(std::iter::repeat_n(
                    b'\n',
                    breaks + usize::from(!out.is_empty()),
                ));
            }
            breaks = 0;
            out.extend_from_slice(&self.text[line.start + width..line.end]);
            self.at += 1;
        }
        match chomp {
            b'-' => {}
            b'+' => out.extend(std::iter::repeat_n(b'\n', breaks + 1)),
            _ => out.push(b'\n'),
        }
        self.events.push(Ev::Scalar {
            bytes: Cow::Owned(out),
            plain: false,
            line: 0,
        });
        if self.deeper(indent).is_some() {
            return Err(Bail);
        }
        Ok(())
    }

    fn key(&mut self, key: &'t [u8], line: usize) -> R<()> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(Bail); // `: x`, or a key too long for libyaml
        }
        let event = if key[0] == b'"' || key[0] == b'\'' {
            let (bytes, used) = quoted(key)?;
            if key[used..].iter().any(|b| *b != b' ') {
                return Err(Bail);
            }
            Ev::Scalar {
                bytes,
                plain: false,
                line,
            }
        } else {
            let plain = plain_block(key)?;
            if plain.len() != key.iter().rposition(|b| *b != b' ').map_or(0, |i| i + 1) {
                return Err(Bail);
            }
            Ev::Scalar {
                bytes: Cow::Borrowed(plain),
                plain: true,
                line,
            }
        };
        self.events.push(event);
        Ok(())
    }
}

/// A line at column 0 that this scanner leaves to libyaml, wherever it stands (between keys, in
/// a nested block, after a literal block, between documents), so that what is read is what
/// libyaml reads, or the same error with its line:
///
/// - `...`: a document end when a blank or the line's end follows (it ends every open block,
///   and text after it on its line is an error, never a key: `... resources: {}`), and `...x`,
///   which only looks like one;
/// - `%`: a directive;
/// - `---` with anything after it but spaces and a comment: content on the marker's line
///   (`--- {a: 1}`, `--- |`, `--- !tag`), or `---x`, a plain scalar that looks like a marker.
///
/// A bare `---` (or `--- # comment`), what manifest streams are made of, stays the scanner's.
fn libyaml_line(line: &[u8]) -> bool {
    if line.starts_with(b"...") || line.first() == Some(&b'%') {
        return true;
    }
    line.starts_with(b"---") && line.get(3).is_some() && trailing(&line[3..]).is_err()
}

/// `-` then a space or the line's end: a sequence entry.
fn is_entry(rest: &[u8]) -> bool {
    rest.first() == Some(&b'-') && rest.get(1).is_none_or(|b| *b == b' ')
}

/// Where the key of a `key: value` line ends (the `:`), or None when the line is not one.
fn key_end(content: &[u8]) -> R<Option<usize>> {
    if content.is_empty() {
        return Ok(None);
    }
    if content[0] == b'"' || content[0] == b'\'' {
        let (_, used) = quoted(content)?;
        let mut i = used;
        while content.get(i) == Some(&b' ') {
            i += 1;
        }
        if content.get(i) == Some(&b':') && content.get(i + 1).is_none_or(|b| *b == b' ') {
            return Ok(Some(i));
        }
        return Ok(None);
    }
    for i in 0..content.len() {
        match content[i] {
            b':' if content.get(i + 1).is_none_or(|b| *b == b' ') => return Ok(Some(i)),
            b'#' if i > 0 && content[i - 1] == b' ' => return Ok(None),
            _ => {}
        }
    }
    Ok(None)
}

/// A plain scalar in block context: up to a comment, without trailing spaces; it must start
/// as a plain scalar does and hold no `: ` (libyaml: "mapping values are not allowed here").
fn plain_block(content: &[u8]) -> R<&[u8]> {
    let first = content[0];
    if b"-?:,[]{}#&*!|>'\"%@`".contains(&first) {
        if first != b'-' || content.get(1).is_none_or(|b| *b == b' ') {
            return Err(Bail);
        }
    }
    let mut end = content.len();
    for i in 0..content.len() {
        match content[i] {
            b'#' if content[i - 1] == b' ' => {
                end = i;
                break;
            }
            b':' if content.get(i + 1).is_none_or(|b| *b == b' ') => return Err(Bail),
            _ => {}
        }
    }
    while end > 0 && content[end - 1] == b' ' {
        end -= 1;
    }
    Ok(&content[..end])
}

/// A one-line quoted scalar at the start of `content`: its value and the bytes it used.
fn quoted(content: &[u8]) -> R<(Cow<'_, [u8]>, usize)> {
    let quote = content[0];
    if quote == b'"' {
        for i in 1..content.len() {
            match content[i] {
                b'\\' => return Err(Bail), // escapes are libyaml's
                b'"' => return Ok((Cow::Borrowed(&content[1..i]), i + 1)),
                _ => {}
            }
        }
        return Err(Bail); // it goes on past the line
    }
    let mut out: Option<Vec<u8>> = None;
    let mut i = 1;
    while i < content.len() {
        if content[i] == b'\'' {
            if content.get(i + 1) == Some(&b'\'') {
                out.get_or_insert_with(|| content[1..i].to_vec())
                    .push(b'\'');
                i += 2;
                continue;
            }
            let value = match out {
                Some(v) => Cow::Owned(v),
                None => Cow::Borrowed(&content[1..i]),
            };
            return Ok((value, i + 1));
        }
        if let Some(v) = out.as_mut() {
            v.push(content[i]);
        }
        i += 1;
    }
    Err(Bail)
}

/// After a value on its line: spaces, then nothing or a comment.
fn trailing(rest: &[u8]) -> R<()> {
    let spaces = rest.iter().take_while(|b| **b == b' ').count();
    match rest.get(spaces) {
        None => Ok(()),
        Some(b'#') if spaces > 0 => Ok(()),
        _ => Err(Bail),
    }
}

/// A flow collection on one line.
struct Flow<'a, 't> {
    text: &'t [u8],
    at: usize,
    events: &'a mut Vec<Ev<'t>>,
    depth: usize,
}

impl<'t> Flow<'_, 't> {
    fn spaces(&mut self) {
        while self.text.get(self.at) == Some(&b' ') {
            self.at += 1;
        }
    }

    fn node(&mut self) -> R<()> {
        match self.text.get(self.at) {
            Some(b'[') => self.collection(b']', false),
            Some(b'{') => self.collection(b'}', true),
            Some(b'"') | Some(b'\'') => {
                let (bytes, used) = quoted(&self.text[self.at..])?;
                self.at += used;
                self.events.push(Ev::Scalar {
                    bytes,
                    plain: false,
                    line: 0,
                });
                Ok(())
            }
            Some(_) => {
                let plain = self.plain()?;
                self.events.push(Ev::Scalar {
                    bytes: Cow::Borrowed(plain),
                    plain: true,
                    line: 0,
                });
                Ok(())
            }
            None => Err(Bail),
        }
    }

    /// `[a, b]` or `{k: v, ...}`; no empty entries, no trailing comma, no `{k}`.
    fn collection(&mut self, close: u8, mapping: bool) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(Bail);
        }
        self.events.push(if mapping {
            Ev::MapStart { line: 0 }
        } else {
            Ev::SeqStart { line: 0 }
        });
        self.at += 1;
        self.spaces();
        if self.text.get(self.at) == Some(&close) {
            self.at += 1;
            self.events.push(Ev::End);
            self.depth -= 1;
            return Ok(());
        }
        loop {
            if mapping {
                let key = self.at;
                match self.text.get(self.at) {
                    Some(b'[') | Some(b'{') | None => return Err(Bail), // a complex key
                    _ => self.node()?,
                }
                self.spaces();
                if self.text.get(self.at) != Some(&b':')
                    || self.text.get(self.at + 1) != Some(&b' ')
                    || self.at - key > MAX_KEY
                {
                    return Err(Bail); // past MAX_KEY, libyaml finds no key: an error
                }
                self.at += 1;
                self.spaces();
            }
            self.node()?;
            self.spaces();
            match self.text.get(self.at) {
                Some(b',') => {
                    self.at += 1;
                    self.spaces();
                    if matches!(
                        self.text.get(self.at),
                        Some(b']') | Some(b'}') | Some(b',') | None
                    ) {
                        return Err(Bail);
                    }
                }
                Some(c) if *c == close => {
                    self.at += 1;
                    self.events.push(Ev::End);
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(Bail),
            }
        }
    }

    /// A plain scalar in flow context: up to `,`, `]`, `}` or `: `, without trailing spaces.
    fn plain(&mut self) -> R<&'t [u8]> {
        let start = self.at;
        let first = self.text[start];
        if b"-?:,[]{}#&*!|>'\"%@`".contains(&first) {
            if first != b'-'
                || self
                    .text
                    .get(start + 1)
                    .is_none_or(|b| b" ,[]{}".contains(b))
            {
                return Err(Bail);
            }
        }
        let mut end = start;
        while let Some(&b) = self.text.get(end) {
            match b {
                b',' | b']' | b'}' => break,
                b':' => {
                    if self.text.get(end + 1) == Some(&b' ') {
                        break;
                    }
                    return Err(Bail); // `a:b` in a flow: libyaml's reading is its own
                }
                b'[' | b'{' | b'#' | b'"' | b'\'' => return Err(Bail),
                _ => end += 1,
            }
        }
        self.at = end;
        while end > start && self.text[end - 1] == b' ' {
            end -= 1;
        }
        if end == start {
            return Err(Bail);
        }
        Ok(&self.text[start..end])
    }
}
