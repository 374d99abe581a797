//! prune-gate's fast YAML reader: one pass over libyaml's events, in native code, building the
//! Python dicts, lists and scalars a manifest is made of.
//!
//! It is `gate.sources.yamlevents`' reader moved out of Python, with the same contract: it
//! covers what manifests are made of (anchors, and aliases of scalars, as `name: &app x` and
//! `*app`; no aliases of collections, explicit tags, complex or duplicate keys, `1` and `'1'`
//! included, since the careful reader compares keys by their text; nesting and aliases within
//! their limits) and answers None for anything else, a syntax error included,
//! so the caller reads that text the careful way, with its exact error. Plain scalars that a
//! resolver may claim (their first character is one the Python loader's resolvers are keyed
//! by) are read by the Python function the caller passes, so numbers, booleans and nulls read
//! exactly as the careful loader reads them; every scalar is memoised, since keys and small
//! values repeat on every object (that sharing is also most of the memory saved).
//!
//! The parser is unsafe-libyaml: libyaml 0.2.5, the version PyYAML's wheels are built with,
//! translated to Rust, so the events and their marks are the careful reader's.

mod scan;

use std::borrow::Cow;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use unsafe_libyaml as y;

use scan::Ev;

/// Scalars kept for reuse, by their text; past this many, new ones are built each time.
const MEMO_LIMIT: usize = 100_000;

struct Memo {
    plain: HashMap<Box<[u8]>, Py<PyAny>>,
    quoted: HashMap<Box<[u8]>, Py<PyAny>>,
}

/// Only touched with the GIL held, so the lock is never contended.
static MEMO: Mutex<Option<Memo>> = Mutex::new(None);

/// The text uses something this reader leaves to the careful one.
struct Unsupported;

/// libyaml's parser over one text, freed when dropped.
struct Parser {
    raw: Box<MaybeUninit<y::yaml_parser_t>>,
}

impl Parser {
    fn new(text: &[u8]) -> Option<Parser> {
        let mut raw = Box::new(MaybeUninit::<y::yaml_parser_t>::uninit());
        unsafe {
            if !y::yaml_parser_initialize(raw.as_mut_ptr()).ok {
                return None;
            }
            y::yaml_parser_set_input_string(raw.as_mut_ptr(), text.as_ptr(), text.len() as u64);
        }
        Some(Parser { raw })
    }

    /// The next event, or None on a syntax error.
    fn next(&mut self) -> Option<Event> {
        let mut event = MaybeUninit::<y::yaml_event_t>::uninit();
        unsafe {
            if !y::yaml_parser_parse(self.raw.as_mut_ptr(), event.as_mut_ptr()).ok {
                return None;
            }
            Some(Event {
                raw: event.assume_init(),
            })
        }
    }
}

impl Drop for Parser {
    fn drop(&mut self) {
        unsafe { y::yaml_parser_delete(self.raw.as_mut_ptr()) }
    }
}

/// One event, freed when dropped.
struct Event {
    raw: y::yaml_event_t,
}

impl Drop for Event {
    fn drop(&mut self) {
        unsafe { y::yaml_event_delete(&mut self.raw) }
    }
}

/// libyaml's events as the builder needs them, a node's anchor as an event of its own before
/// it; anything the builder leaves to the careful reader (tags, a syntax error) is
/// `Unsupported`.
struct LibyamlEvents {
    parser: Parser,
    /// The node event after the `Anchor` just given.
    pending: Option<Ev<'static>>,
}

/// A NUL-terminated name libyaml allocated (an anchor or an alias), copied.
unsafe fn name(raw: *const u8) -> Vec<u8> {
    std::ffi::CStr::from_ptr(raw.cast()).to_bytes().to_vec()
}

impl LibyamlEvents {
    fn next(&mut self) -> Result<Option<Ev<'static>>, Unsupported> {
        if let Some(pending) = self.pending.take() {
            return Ok(Some(pending));
        }
        loop {
            let event = self.parser.next().ok_or(Unsupported)?; // a syntax error
            let ev = &event.raw;
            let line = ev.start_mark.line as usize + 1;
            let (node, anchor) = match ev.type_ {
                y::YAML_STREAM_END_EVENT => return Ok(None),
                y::YAML_SCALAR_EVENT => {
                    let s = unsafe { ev.data.scalar };
                    if !s.tag.is_null() {
                        return Err(Unsupported);
                    }
                    let bytes = unsafe { std::slice::from_raw_parts(s.value, s.length as usize) };
                    let node = Ev::Scalar {
                        bytes: Cow::Owned(bytes.to_vec()),
                        plain: s.plain_implicit,
                        line,
                    };
                    (node, s.anchor)
                }
                y::YAML_MAPPING_START_EVENT | y::YAML_SEQUENCE_START_EVENT => {
                    let mapping = ev.type_ == y::YAML_MAPPING_START_EVENT;
                    let (anchor, implicit) = unsafe {
                        if mapping {
                            (ev.data.mapping_start.anchor, ev.data.mapping_start.implicit)
                        } else {
                            (
                                ev.data.sequence_start.anchor,
                                ev.data.sequence_start.implicit,
                            )
                        }
                    };
                    if !implicit {
                        return Err(Unsupported); // a tag
                    }
                    let node = if mapping {
                        Ev::MapStart { line }
                    } else {
                        Ev::SeqStart { line }
                    };
                    (node, anchor)
                }
                y::YAML_MAPPING_END_EVENT | y::YAML_SEQUENCE_END_EVENT => {
                    (Ev::End, std::ptr::null_mut())
                }
                y::YAML_ALIAS_EVENT => {
                    let alias = unsafe { name(ev.data.alias.anchor) };
                    (Ev::Alias(alias), std::ptr::null_mut())
                }
                _ => continue, // stream start, document start and end
            };
            if anchor.is_null() {
                return Ok(Some(node));
            }
            self.pending = Some(node);
            return Ok(Some(Ev::Anchor(unsafe { name(anchor) })));
        }
    }
}

/// An open collection: the object, whether it is a list, a mapping's pending key, and the texts
/// of its keys that are not strings (`1`, `true`, `~`; see `same_text`).
struct Open<'py> {
    value: Bound<'py, PyAny>,
    list: bool,
    key: Option<Bound<'py, PyAny>>,
    odd_keys: Vec<Vec<u8>>,
}

/// Whether a new key of `dict` (`value`, written `text`) has the text of a key it already has,
/// as a value Python takes for another: `1` and `'1'`, `true` and `"true"`, `~` and `'~'` (or
/// two `.nan`). The careful reader compares keys by their text and refuses that as a duplicate,
/// and so does kustomize ("mapping key "1" already defined"); Python's dict would keep both.
/// Keys that are not strings are rare, so only their texts are kept (`odd_keys`), and a string
/// key is looked for there only when there are some.
fn same_text(
    odd_keys: &mut Vec<Vec<u8>>,
    dict: &Bound<'_, PyDict>,
    value: &Bound<'_, PyAny>,
    text: &[u8],
) -> PyResult<bool> {
    if odd_keys.iter().any(|k| k.as_slice() == text) {
        return Ok(true);
    }
    if value.is_instance_of::<PyString>() {
        return Ok(false);
    }
    let as_string = std::str::from_utf8(text).map_err(|e| {
        pyo3::exceptions::PyValueError::new_err(format!("invalid UTF-8 in a scalar: {e}"))
    })?;
    if dict.contains(as_string)? {
        return Ok(true);
    }
    odd_keys.push(text.to_vec());
    Ok(false)
}

/// How plain scalars are read: the Python resolver, its "not mine" answer, and the first
/// characters its resolvers are keyed by (a plain scalar starting otherwise is a string).
struct Plain<'a, 'py> {
    resolve: &'a Bound<'py, PyAny>,
    unsupported: &'a Bound<'py, PyAny>,
    first: [bool; 256],
    empty: bool,
}

fn scalar<'py>(
    py: Python<'py>,
    memo: &mut Memo,
    plain: &Plain<'_, 'py>,
    bytes: &[u8],
    is_plain: bool,
) -> Result<Bound<'py, PyAny>, PyErr> {
    let table = if is_plain {
        &mut memo.plain
    } else {
        &mut memo.quoted
    };
    if let Some(known) = table.get(bytes) {
        return Ok(known.bind(py).clone());
    }
    // libyaml hands out valid UTF-8 only (it checks its input), as PyYAML's decode relies on;
    // the scanner takes ASCII only
    let text = std::str::from_utf8(bytes).map_err(|e| {
        pyo3::exceptions::PyValueError::new_err(format!("invalid UTF-8 in a scalar: {e}"))
    })?;
    let needs_resolver = is_plain
        && match bytes.first() {
            None => plain.empty,
            Some(b) => plain.first[*b as usize],
        };
    let value = if needs_resolver {
        plain.resolve.call1((text,))?
    } else {
        PyString::new(py, text).into_any()
    };
    if table.len() < MEMO_LIMIT {
        table.insert(bytes.into(), value.clone().unbind());
    }
    Ok(value)
}

/// The documents the events make, each with its root's line.
///
/// Anchors are kept per document, as PyYAML keeps them: a scalar's value, or None for a
/// collection's. An alias of a scalar is that value. Any other alias (undefined, or of a
/// collection), an alias as a key, a second anchor of one name in a document, and more than
/// `max_aliases` aliases in the text, are left to the careful reader, which reads them or
/// refuses them with their line.
fn build<'py, 't>(
    py: Python<'py>,
    mut next: impl FnMut() -> Result<Option<Ev<'t>>, Unsupported>,
    max_depth: usize,
    max_aliases: usize,
    plain: &Plain<'_, 'py>,
    memo: &mut Memo,
) -> Result<Result<Bound<'py, PyList>, Unsupported>, PyErr> {
    let docs = PyList::empty(py);
    let mut stack: Vec<Open<'py>> = Vec::new();
    let mut anchors: HashMap<Vec<u8>, Option<Bound<'py, PyAny>>> = HashMap::new();
    let mut anchor: Option<Vec<u8>> = None; // the next node's
    let mut aliases = 0;
    loop {
        let event = match next() {
            Ok(Some(event)) => event,
            Ok(None) => return Ok(Ok(docs)),
            Err(Unsupported) => return Ok(Err(Unsupported)),
        };
        let mut text: Option<Vec<u8>> = None; // a scalar's, kept for a key that is not a string
        let (value, line, list) = match event {
            Ev::Anchor(name) => {
                if stack.is_empty() {
                    anchors.clear(); // a document's root: anchors are per document
                }
                if anchors.contains_key(&name) {
                    return Ok(Err(Unsupported)); // PyYAML refuses a duplicate anchor
                }
                anchor = Some(name);
                continue;
            }
            Ev::Alias(name) => {
                aliases += 1;
                let as_key = stack
                    .last()
                    .is_some_and(|open| !open.list && open.key.is_none());
                // at a root, no anchor is defined yet: the document's own come after it
                if stack.is_empty() || as_key || aliases > max_aliases {
                    return Ok(Err(Unsupported));
                }
                match anchors.get(&name) {
                    Some(Some(value)) => (value.clone(), 0, None),
                    _ => return Ok(Err(Unsupported)), // undefined, or a collection's
                }
            }
            Ev::Scalar {
                bytes,
                plain: is_plain,
                line,
            } => {
                let value = scalar(py, memo, plain, &bytes, is_plain)?;
                if is_plain && value.is(plain.unsupported) {
                    return Ok(Err(Unsupported)); // a merge key, or a tag this reader leaves
                }
                let odd = |open: &Open<'py>| {
                    !open.list
                        && open.key.is_none()
                        && (!open.odd_keys.is_empty() || !value.is_instance_of::<PyString>())
                };
                if stack.last().is_some_and(odd) {
                    text = Some(bytes.into_owned()); // a key to look for in `odd_keys`
                }
                (value, line, None)
            }
            Ev::MapStart { line } | Ev::SeqStart { line } => {
                if stack.len() >= max_depth {
                    return Ok(Err(Unsupported));
                }
                let list = matches!(event, Ev::SeqStart { .. });
                let value = if list {
                    PyList::empty(py).into_any()
                } else {
                    PyDict::new(py).into_any()
                };
                (value, line, Some(list))
            }
            Ev::End => {
                stack.pop();
                continue;
            }
        };
        if let Some(name) = anchor.take() {
            anchors.insert(
                name,
                if list.is_none() {
                    Some(value.clone())
                } else {
                    None
                },
            );
        } else if stack.is_empty() {
            anchors.clear(); // a document's root: anchors are per document
        }
        match stack.last_mut() {
            None => {
                docs.append(PyTuple::new(
                    py,
                    [line.into_pyobject(py)?.into_any(), value.clone()],
                )?)?;
            }
            Some(parent) if parent.list => {
                parent.value.downcast::<PyList>()?.append(&value)?;
            }
            Some(parent) => {
                let dict = parent.value.downcast::<PyDict>()?;
                match parent.key.take() {
                    None => {
                        if list.is_some() || dict.contains(&value)? {
                            return Ok(Err(Unsupported)); // a complex key, or a duplicate
                        }
                        if let Some(text) = &text {
                            if same_text(&mut parent.odd_keys, dict, &value, text)? {
                                return Ok(Err(Unsupported));
                            }
                        }
                        parent.key = Some(value.clone());
                    }
                    Some(key) => dict.set_item(key, &value)?,
                }
            }
        }
        if let Some(list) = list {
            stack.push(Open {
                value,
                list,
                key: None,
                odd_keys: Vec::new(),
            });
        }
    }
}

/// Every document of `text` with the line of its root node, or None to read it carefully.
///
/// `resolve(value)` reads a plain scalar that may not be a string (and returns `unsupported`
/// for one this reader must leave alone); `resolved_first` is the characters a plain scalar
/// must start with for that to be possible, and `resolve_empty` whether the empty one is.
/// With `use_scanner`, the fast scanner (`scan`) reads the texts it can, libyaml the rest.
/// Aliases (of scalars) are read up to `max_aliases` in the text, none by default.
#[pyfunction]
#[pyo3(signature = (text, max_depth, resolve, unsupported, resolved_first, resolve_empty, use_scanner = true, max_aliases = 0))]
#[allow(clippy::too_many_arguments)]
fn load_documents<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyString>,
    max_depth: usize,
    resolve: &Bound<'py, PyAny>,
    unsupported: &Bound<'py, PyAny>,
    resolved_first: &str,
    resolve_empty: bool,
    use_scanner: bool,
    max_aliases: usize,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let mut first = [false; 256];
    for c in resolved_first.chars() {
        if c.is_ascii() {
            first[c as usize] = true;
        } else {
            // a resolver keyed by a non-ASCII character: every text that has one goes the
            // Python way, which is exact (no known loader has one)
            first = [true; 256];
            break;
        }
    }
    let plain = Plain {
        resolve,
        unsupported,
        first,
        empty: resolve_empty,
    };
    let bytes = text.to_str()?.as_bytes();
    let mut guard = MEMO.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let memo = guard.get_or_insert_with(|| Memo {
        plain: HashMap::new(),
        quoted: HashMap::new(),
    });
    if use_scanner {
        if let Some(events) = scan_events(bytes) {
            let mut events = events.into_iter();
            let built = build(
                py,
                || Ok(events.next()),
                max_depth,
                max_aliases,
                &plain,
                memo,
            )?;
            return Ok(built.ok());
        }
    }
    let Some(parser) = Parser::new(bytes) else {
        return Ok(None);
    };
    let mut events = LibyamlEvents {
        parser,
        pending: None,
    };
    Ok(build(py, || events.next(), max_depth, max_aliases, &plain, memo)?.ok())
}

/// The scanner's events for `text`, or None when it leaves the text to libyaml. A panic in the
/// scanner (a bug: the tests call `scanned`, which lets it through) leaves the text to libyaml
/// too, rather than failing the read.
fn scan_events(text: &[u8]) -> Option<Vec<Ev<'_>>> {
    std::panic::catch_unwind(|| {
        let mut scanner = scan::Scanner::new(text).ok()?;
        scanner.run().ok()?;
        Some(scanner.events)
    })
    .ok()
    .flatten()
}

/// Whether the fast scanner reads `text` by itself (else libyaml does): for tests and benchmarks.
#[pyfunction]
fn scanned(text: &str) -> bool {
    scan::Scanner::new(text.as_bytes()).is_ok_and(|mut scanner| scanner.run().is_ok())
}

/// Forget the memoised scalars (a test that changes the resolver calls this).
#[pyfunction]
fn clear_memo() {
    let mut guard = MEMO.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    *guard = None;
}

#[pymodule]
fn prune_gate_yaml(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_documents, m)?)?;
    m.add_function(wrap_pyfunction!(clear_memo, m)?)?;
    m.add_function(wrap_pyfunction!(scanned, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD", env!("PRUNE_GATE_YAML_BUILD"))?;
    Ok(())
}
