"""Questions about a user's own documents, made from their text without a teacher model.

:func:`stated_questions` finds what a passage of clean documentation text states in a form that
has a natural question (an install command, a supported Python version, a licence, a default value,
an author or copyright holder, what a function does or returns, what a package is) and returns
``(question, answer)`` pairs whose answer is a span of the passage (or, for "what is / what does",
the passage's sentence); :func:`prose_questions` does the same for prose (who did something, in
which year, how many of something), and :func:`explain_questions` asks the how and why questions a
passage explains, answered with its explaining sentence. :func:`gap_questions` asks a document about its own subject
the kinds of detail that the *whole* document does not state (checked by the absence of the words
that would state it): the near misses an abstaining reader must decline. :data:`OFF_TOPIC` holds
real-world questions no user corpus is expected to answer. :func:`questions_from_documents` puts the
three together as labelled questions for ``selfrag calibrate``. Pure functions of text and a seeded
``random.Random``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*_\"'(])")


def sentences(text: str) -> list[str]:
    """Prose sentences of a passage (one per line of code, which holds no sentence)."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if any(re.match(r"\s*(>>>|\$|#|from |import |def |class |pip |python)", ln) for ln in lines):
            continue
        out += [s.strip() for s in _SENT.split(" ".join(ln.strip() for ln in lines)) if len(s.split()) >= 4]
    return out


def _pick(rng: random.Random, options: Sequence[str], **fields: str) -> str:
    return rng.choice(options).format(**fields)


_INSTALL = re.compile(r"(?m)^\s*(?:\$\s*)?((?:sudo\s+)?(?:python3?\s+-m\s+)?(?:pip3?|conda|uv pip|poetry|apt-get|apt|brew)"
                      r"\s+(?:install|add)\s+[^\n#]{2,80}?)\s*$")
_PYVER = re.compile(r"Python\s+((?:3|2)\.\d{1,2}(?:\+|\s*(?:or|and)\s+(?:newer|later|above|higher))?)", re.I)
_PYVER_CUE = re.compile(r"support|require|compatib|newer|later|\+|works with|tested|runs on", re.I)
_LICENSE = re.compile(r"(?:licen[sc]ed under (?:the )?|released under (?:the )?|distributed under (?:the )?|is an? )"
                      r"((?:MIT|BSD|Apache|GPL|LGPL|AGPL|MPL|ISC|PSF|Unlicense|CC0|Mozilla)[\w.\- ]{0,24}?)"
                      r"(?:\s+[Ll]icen[sc]e\b|[.,;)]|\s+licen[sc]ed)", re.I)
_LICENSE_SHORT = re.compile(r"\b(MIT|BSD|Apache(?:\s*2(?:\.0)?)?|GPL(?:v?\d)?|MPL|ISC)[- ]licen[sc]ed\b", re.I)
_NAME = r"[A-Z][a-z'\-]+(?: [A-Z]\.)?(?: (?:de |van |von )?[A-Z][a-z'\-]+){1,2}"
_BY = re.compile(r"\b(written|created|developed|maintained|authored|designed|started)"
                 rf"(?: and (?:written|created|developed|maintained))? by ({_NAME})\b(?![.\w]*[a-z]\()")
_COPYRIGHT = re.compile(r"Copyright (?:\(c\) |©\s*)?(?:\d{4}(?:\s*[-–]\s*\d{4})?,?\s+)(?:by\s+)?"
                        r"([A-Z][\w'\-]+(?:\s+[A-Z][\w'\-]+){0,3}(?:,? (?:Inc|Ltd|LLC)\.?)?)")
_DEFAULT = [
    re.compile(r"`?(?P<p>[a-z_][a-z0-9_]{2,40})`?\s*\((?:[^()]{0,40}?)?default(?:s)?(?: is|:| to|=)\s*`?(?P<v>[^`),\n]{1,30})`?\)", re.I),
    re.compile(r"`?(?P<p>[a-z_][a-z0-9_]{2,40})`?\s*(?::[^\n]{0,40}?)?,\s*default(?:s)?(?: is|:| to|=)\s*`?(?P<v>[^`,\n]{1,30}?)`?\s*$", re.I | re.M),
    re.compile(r"`?(?P<p>[a-z_][a-z0-9_]{2,40})`?[^.\n]{0,60}?\.\s*[Dd]efault(?:s)?(?: is| to|:)\s*`?(?P<v>[^`.,\n]{1,30}?)`?[.\n]"),
]
_RETURNS = re.compile(r"(?ms)^\s*Returns?\s*:?\s*\n(?:\s*-{3,}\s*\n)?\s*(?P<body>[^\n]{8,160})")
_API_HEAD = re.compile(r"(?m)^(?P<q>[a-zA-Z_][\w.]*\.(?P<f>[A-Za-z_]\w*))\((?P<sig>[^\n]*)\)\s*$")


def install_questions(name: str, text: str, rng: random.Random) -> list[tuple[str, str]]:
    out = []
    for m in _INSTALL.finditer(text):
        cmd = " ".join(m.group(1).split())
        if name.lower().replace("-", "") in cmd.lower().replace("-", "").replace("_", ""):
            q = _pick(rng, ["How do you install {n}?", "Which command installs {n}?", "How can I install {n} with pip?",
                            "What is the command to install {n}?"], n=name)
            out.append((q, cmd))
            break
    return out


def python_version_questions(name: str, text: str, rng: random.Random) -> list[tuple[str, str]]:
    for sent in sentences(text):
        m = _PYVER.search(sent)
        if m and _PYVER_CUE.search(sent) and not re.search(r"\bdrop|remov|deprecat|no longer", sent, re.I):
            q = _pick(rng, ["Which Python versions does {n} support?", "What Python version does {n} require?",
                            "Which version of Python is needed for {n}?", "Does {n} support Python 3, and from which version?"],
                      n=name)
            return [(q, m.group(1).split()[0].rstrip("+") if "+" not in m.group(1) else m.group(1))]
    return []


def license_questions(name: str, text: str, rng: random.Random) -> list[tuple[str, str]]:
    m = _LICENSE.search(text) or _LICENSE_SHORT.search(text)
    if not m:
        return []
    lic = m.group(1).strip()
    q = _pick(rng, ["Under which license is {n} released?", "What is the license of {n}?", "Which licence does {n} use?",
                    "What license is {n} distributed under?"], n=name)
    return [(q, lic)]


def author_questions(name: str, text: str, rng: random.Random) -> list[tuple[str, str]]:
    out = []
    m = _BY.search(text)
    if m:
        verb, who = m.group(1).lower(), m.group(2)
        q = {"maintained": "Who maintains {n}?", "written": "Who wrote {n}?", "created": "Who created {n}?",
             "developed": "Who develops {n}?", "authored": "Who is the author of {n}?", "designed": "Who designed {n}?",
             "started": "Who started {n}?"}[verb]
        out.append((q.format(n=name), who))
    m = _COPYRIGHT.search(text)
    if m and not re.fullmatch(r"(The|This|All|Copyright)", m.group(1).split()[0]):
        out.append((_pick(rng, ["Who holds the copyright of {n}?", "Who is the copyright holder of {n}?"], n=name), m.group(1)))
    return out


_NOT_NAMES = {"default", "value", "the", "this", "which", "none", "that", "and", "for", "with", "its", "are", "can",
              "will", "not", "has", "have", "set", "use", "used", "also", "option", "options", "argument", "parameter"}
_STOP = {"a", "an", "the", "to", "is", "be", "it", "this", "that", "default", "value", "used", "set", "of", "in", "on",
         "and", "or", "if", "as", "by", "for", "with"}


def _literal(value: str) -> bool:
    """A value that reads as a setting: a number, a constant, a quoted string or one code-like word."""
    v = value.strip()
    if not v or len(v.split()) > 3 or v.lower() in _STOP:
        return False
    return bool(re.fullmatch(r"-?[\d_.]+(?:\s*\*\s*[\d_.]+)*\s*(?:[a-zA-Z%]{0,8})|True|False|None|null|true|false"
                             r"|['\"][^'\"]{0,30}['\"]|[\w.\-/@#:+]+", v))


def default_questions(name: str, text: str, rng: random.Random, limit: int = 2) -> list[tuple[str, str]]:
    out, seen = [], set()
    for pattern in _DEFAULT:
        for m in pattern.finditer(text):
            p, v = m.group("p"), m.group("v").strip().strip("'\"` ")
            if p in seen or p.lower() in _NOT_NAMES or not _literal(v):
                continue
            seen.add(p)
            q = _pick(rng, ["What is the default value of {p} in {n}?", "What does {p} default to in {n}?",
                            "In {n}, what is the default {p}?", "What is {p} set to by default in {n}?"], p=p, n=name)
            out.append((q, v))
            if len(out) >= limit:
                return out
    return out


def definition_questions(name: str, text: str, rng: random.Random) -> list[tuple[str, str]]:
    """"What is NAME?" answered with the passage's sentence that defines it."""
    key = re.escape(name.split(".")[-1])
    for sent in sentences(text)[:6]:
        if (re.match(rf"[`*_]*(?:The )?{key}[`*_]*\s+(?:is an?|is the|are|provides|offers|lets you|makes|helps)\b", sent, re.I)
                and len(sent) < 300 and not re.search(r"licen[sc]|not\b|n't\b", sent, re.I)):
            q = _pick(rng, ["What is {n}?", "What does {n} do?", "What is {n} used for?", "Can you describe {n}?"], n=name)
            return [(q, sent)]
    return []


def api_questions(text: str, rng: random.Random, limit: int = 3) -> list[tuple[str, str]]:
    """From an API reference page: what a function does (its docstring's first sentence), what it
    returns, and what a parameter defaults to (from the signature)."""
    out = []
    heads = list(_API_HEAD.finditer(text))
    for i, m in enumerate(heads):
        body = text[m.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)].strip()
        qual, func, sig = m.group("q"), m.group("f"), m.group("sig")
        first = sentences(body)[:1]
        if first and len(first[0]) < 240:
            q = _pick(rng, ["What does {f} do?", "What is {f} for?", "What does the {f} function do in {m}?",
                            "Describe {f}."], f=func, m=qual.rsplit(".", 1)[0])
            out.append((q, first[0]))
        r = _RETURNS.search(body)
        if r and len(out) < limit:
            out.append((_pick(rng, ["What does {f} return?", "What is the return value of {f}?"], f=func), r.group("body").strip()))
        for p, v in re.findall(r"\b([a-z_][a-z0-9_]{2,30})(?::\s*[^=,]{1,40})?\s*=\s*([^,()\[\]]{1,20})", sig):
            if p not in ("self", "cls") and v.strip() not in ("...",) and len(out) < limit:
                out.append((_pick(rng, ["What is the default value of {p} in {f}?", "What does the {p} argument of {f} default to?"],
                                  p=p, f=func), v.strip()))
                break
        if len(out) >= limit:
            break
    return out


def stated_questions(name: str, text: str, rng: random.Random, *, kind: str = "readme") -> list[tuple[str, str]]:
    """Every ``(question, answer)`` the passage ``text`` of document ``name`` states; each answer is a
    span of ``text`` (case kept)."""
    if kind == "api":
        pairs = api_questions(text, rng)
    else:
        pairs = (install_questions(name, text, rng) + python_version_questions(name, text, rng)
                 + license_questions(name, text, rng) + author_questions(name, text, rng)
                 + default_questions(name, text, rng) + definition_questions(name, text, rng))
    return [(q, a) for q, a in pairs if a and a.lower() in text.lower()]


#: Near-miss templates: (question forms, words whose absence from the whole document means it is not stated).
GAPS: list[tuple[tuple[str, ...], str]] = [
    (("Under which license is {n} released?", "What is the license of {n}?"), r"licen[sc]|copyright|MIT|BSD|Apache|GPL"),
    (("Which Python versions does {n} support?", "What Python version does {n} require?"), r"python\s*[23]\.\d|python\s*3\b|py3"),
    (("Who maintains {n}?", "Who created {n}?", "Who is the author of {n}?"),
     r"\bby [A-Z]|author|maintain|copyright|created|written|developed|©|\(c\)"),
    (("Which company sponsors {n}?", "Who funds the development of {n}?"), r"sponsor|fund|support|tidelift|donat|backer"),
    (("In which year was {n} first released?", "When was the first version of {n} published?"), r"\b(19|20)\d\d\b|released|since"),
    (("How much faster is {n} than the standard library?", "How many times faster is {n} than its alternatives?"),
     r"faster|slower|speed|benchmark|perform|times|x\b|%"),
    (("How many downloads per month does {n} have?", "How many GitHub stars does {n} have?"), r"download|star|popular|users"),
    (("Which operating systems does {n} not support?", "Does {n} run on Windows?"), r"windows|linux|macos|os x|platform|posix"),
    (("How do you install {n} with conda?", "Which conda channel provides {n}?"), r"conda"),
    (("What is the latest version of {n}?", "Which version of {n} was released most recently?"),
     r"\bv?\d+\.\d+(\.\d+)?\b|version|release"),
    (("How much memory does {n} use?", "What are the memory requirements of {n}?"), r"memory|ram\b|bytes|MB|GB"),
    (("Which database backends does {n} support?",), r"database|sql|postgres|mysql|sqlite|mongo|redis|backend"),
    (("How do you configure logging in {n}?",), r"log"),
    (("Which version of {n} added async support?", "Does {n} support asyncio, and since which version?"), r"async"),
]


def gap_questions(name: str, document_text: str, rng: random.Random, *, limit: int = 2,
                  parameter_pool: Sequence[str] = ()) -> list[str]:
    """Up to ``limit`` questions about ``name`` that ``document_text`` (the whole document) does not
    answer: gap templates whose cue words are absent, and the default of a parameter taken from
    ``parameter_pool`` (other documents' parameters) that the document never mentions."""
    text = document_text
    options = [forms for forms, cue in GAPS if not re.search(cue, text, re.I)]
    rng.shuffle(options)
    out = [rng.choice(forms).format(n=name) for forms in options[:limit]]
    pool = [p for p in parameter_pool if p not in text and "default" in text.lower()]
    if pool and len(out) < limit + 1 and rng.random() < 0.5:
        p = rng.choice(pool)
        out.append(rng.choice(["What is the default value of {p} in {n}?", "What does {p} default to in {n}?"]).format(p=p, n=name))
    return out


#: Near-miss templates for prose about an entity (a place, an organisation, a person, an event).
PROSE_GAPS: list[tuple[tuple[str, ...], str]] = [
    (("Who founded {n}?", "Who established {n}?"), r"found|establish|set up|built|creat|start"),
    (("How many people work at {n}?", "How many staff does {n} employ?"), r"employ|staff|worker|people|team"),
    (("How much did {n} cost?", "What was the cost of {n}?"), r"cost|price|paid|£|\$|€|euro|pound|dollar|million|budget"),
    (("Who owns {n}?",), r"own|belong|property|bought|sold"),
    (("What is the phone number of {n}?", "What is the website of {n}?"), r"phone|telephone|website|www|http"),
    (("When did {n} close?",), r"clos|shut|ended"),
    (("Who is in charge of {n} today?", "Who runs {n}?"), r"director|head|chief|manager|led by|run by|keeper|mayor|chair"),
    (("What is {n} named after?",), r"named|name"),
]


def prose_questions(text: str, rng: random.Random, limit: int = 2) -> list[tuple[str, str]]:
    """``(question, answer)`` from prose sentences: "... by NAME" (by whom), "in YEAR" (in which year)
    and "NUMBER things" (how many things), asked as the sentence with the span replaced."""
    out = []
    for sent in sentences(text):
        sent = sent.rstrip(".")
        for pattern, wh in ((rf"\bby ({_NAME})\b", "by whom"), (r"\bin ((?:1[5-9]|20)\d\d)\b", "in which year"),
                            (r"\b(\d[\d,.]*) ([a-z]{3,20}s)\b", None)):
            m = re.search(pattern, sent)
            if not m:
                continue
            if wh is None:
                answer, question = m.group(1), sent[: m.start()] + f"how many {m.group(2)}" + sent[m.end():]
            else:
                answer, question = m.group(1), sent[: m.start()] + wh + sent[m.end():]
            if len(question.split()) >= 5:
                out.append((question[0].upper() + question[1:] + "?", answer))
            break
        if len(out) >= limit:
            break
    rng.shuffle(out)
    return out


#: Openers that are discourse markers, not tasks ("To date, ...", "To be fair, ...").
_NOT_TASKS = {"date", "be", "this", "that", "the", "a", "an", "my", "our", "sum", "summarize", "summarise", "conclude",
              "illustrate", "recap", "clarify", "some", "many", "what", "which", "each", "all", "do", "see", "put"}
_VAGUE = re.compile(r"\b(it|this|that|these|those|them|they|you|your|here|above|below|following)\b", re.I)
_PRONOUN_SUBJECT = re.compile(r"(?i)^(it|this|that|these|those|they|we|you|i|he|she|there|here)\b")
_SUBJECT = r"(?P<s>[A-Za-z`*_][\w`*.\-]*(?: [\w`*.\-]+){0,6})"
_TO_TASK = re.compile(r"^To (?P<task>[a-z]+(?: [^,;:]{2,70}?)), (?P<how>[^:]{12,})\.$")
_BY_MEANS = re.compile(rf"^{_SUBJECT} (?P<aux>is|are|can be|may be|should be|must be) (?P<v>[a-z]{{3,}}(?:ed|en)|built|made|set|run|done|"
                       r"found|kept|held|sent|read|split|put|shown|written|given|chosen) (?:either |automatically |only )?"
                       r"by (?P<g>[a-z]{3,}ing)\b[^:]{5,}\.$")
_YOU_CAN = re.compile(r"^You can (?P<task>[a-z]+ [^,;:()]{3,70}?) by (?P<g>[a-z]{3,}ing)\b[^:]{5,}\.$")
_USE_TO = re.compile(r"^Use (?P<tool>[^,;:]{2,50}?) to (?P<task>[a-z]+ [^,;:()]{3,70})\.$")
_BECAUSE = re.compile(rf"^{_SUBJECT} (?P<aux>is|are|was|were|can|cannot|should|must|will|does|do) (?P<rest>[^,;:()]{{3,90}}?),? "
                      r"because (?P<why>[^:]{5,})\.$")


def _subject(subject: str, text: str) -> str:
    """``subject`` as it reads mid-sentence: its first word lower-cased unless ``text`` writes it capitalised
    after another word too (a name, which keeps its case)."""
    first = subject.split()[0]
    common = first[:1].isupper() and (first[1:].islower() or len(first) == 1)
    if common and not re.search(rf"[a-z,] {re.escape(first)}\b", text):
        return first.lower() + subject[len(first):]
    return subject


def _explain_question(sent: str, text: str) -> str | None:
    """The how/why question ``sent`` answers whole, or None (see :func:`explain_questions`)."""
    for pattern in (_TO_TASK, _YOU_CAN, _USE_TO):
        m = pattern.match(sent)
        if m and m.group("task").split()[0] not in _NOT_TASKS and not _VAGUE.search(m.group("task")):
            return f"How {'can' if pattern is _YOU_CAN else 'do'} I {m.group('task')}?"
    for pattern in (_BY_MEANS, _BECAUSE):
        m = pattern.match(sent)
        if not m or _PRONOUN_SUBJECT.match(m.group("s")) or _VAGUE.search(m.group("s")):
            continue
        subject, aux = _subject(m.group("s"), text), m.group("aux")
        if pattern is _BY_MEANS:
            head, *be = aux.split()
            return f"How {head} {subject} {'be ' if be else ''}{m.group('v')}?"
        rest = m.group("rest")
        if aux == "cannot":
            aux, rest = "can", "not " + rest
        return f"Why {aux} {subject} {rest}?"
    return None


def explain_questions(text: str, *, limit: int = 3) -> list[tuple[str, str]]:
    """How and why questions a passage explains, each answered with the whole sentence that explains it:
    "To TASK, DO THIS." and "Use THIS to TASK." (*How do I TASK?*), "You can TASK by DOING ..." (*How can I
    TASK?*), "SUBJECT is VERBED by DOING ..." (*How is SUBJECT VERBED?*) and "SUBJECT is ... because ..."
    (*Why is SUBJECT ...?*). Deterministic; the answer is one of :func:`sentences` of ``text``; sentences
    about "it"/"this" (whose question would be vague) or opening with code are skipped."""
    out: list[tuple[str, str]] = []
    for sent in sentences(text):
        question = _explain_question(sent, text) if len(sent) <= 300 and not sent.startswith("`") else None
        if question and len(question.split()) >= 4:
            out.append((question, sent))
        if len(out) >= limit:
            break
    return out


def gap_questions_for(subject: str, document_text: str, rng: random.Random, *, templates=None, limit: int = 2) -> list[str]:
    """Up to ``limit`` questions about ``subject`` from ``templates`` whose cue words ``document_text`` lacks."""
    options = [forms for forms, cue in (templates or PROSE_GAPS) if not re.search(cue, document_text, re.I)]
    rng.shuffle(options)
    return [rng.choice(forms).format(n=subject) for forms in options[:limit]]


def _off_topic() -> tuple[str, ...]:
    text = resources.files(__package__).joinpath("off_topic.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


#: Real-world questions that a user's own corpus is not expected to answer (the off-topic part of a
#: generated calibration set; distinct from the questions of the project's trust suite).
OFF_TOPIC: tuple[str, ...] = _off_topic()


@dataclass(frozen=True)
class LabelledQuestion:
    """A question with what the right behaviour is: ``answerable`` (one of ``answers`` stated in the
    document ``source``), ``near_miss`` (about ``source``'s subject, not stated) or ``off_topic``."""

    question: str
    kind: str
    answers: tuple[str, ...] = ()
    source: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.kind == "answerable" and not self.answers:
            raise ValueError(f"an answerable question needs answers: {self.question!r}")


KINDS = ("answerable", "near_miss", "off_topic")


def questions_from_documents(documents: Mapping[str, Sequence[str]], rng: random.Random, *,
                             titles: Mapping[str, str] | None = None, answerable: int = 40, near_miss: int = 30,
                             off_topic: int = 30) -> list[LabelledQuestion]:
    """A labelled calibration set from a corpus (source -> its chunks' texts, ``titles``: source -> title):
    stated facts of the chunks (documentation patterns, then prose), gaps of each document, and
    built-in off-topic questions, each part sampled to at most its size."""
    stated, gaps = [], []
    for source, chunks in sorted(documents.items()):
        subject = (titles or {}).get(source) or re.sub(r"[_\-]+", " ", source.rsplit("/", 1)[-1].rsplit(".", 1)[0])
        whole = "\n".join(chunks)
        for chunk in chunks:
            pairs = stated_questions(subject, chunk, rng) or prose_questions(chunk, rng, limit=1)
            stated += [LabelledQuestion(q, "answerable", (a,), source) for q, a in pairs]
        technical = bool(re.search(r"\binstall\b|\bimport\b|\w\(|\bdef\b|--\w", whole))
        near = (gap_questions(subject, whole, rng, limit=2) if technical
                else gap_questions_for(subject, whole, rng, limit=2))
        gaps += [LabelledQuestion(q, "near_miss", (), source) for q in near]
    rng.shuffle(stated)
    rng.shuffle(gaps)
    off = [LabelledQuestion(q, "off_topic") for q in rng.sample(OFF_TOPIC, min(off_topic, len(OFF_TOPIC)))]
    return stated[:answerable] + gaps[:near_miss] + off


def load_questions(rows: Iterable[Mapping[str, object]]) -> list[LabelledQuestion]:
    """Labelled questions from JSON rows ``{question, kind, answers?, source?}`` (``kind`` may be left
    out: ``answerable`` with answers, else ``near_miss`` with a source, else ``off_topic``)."""
    out = []
    for n, row in enumerate(rows, 1):
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"row {n}: no 'question'")
        answers = row.get("answers") or ([row["answer"]] if row.get("answer") else [])
        if isinstance(answers, str):
            answers = [answers]
        source = row.get("source")
        kind = row.get("kind") or ("answerable" if answers else "near_miss" if source else "off_topic")
        try:
            out.append(LabelledQuestion(question.strip(), str(kind), tuple(str(a) for a in answers),
                                        str(source) if source else None))
        except ValueError as exc:
            raise ValueError(f"row {n}: {exc}") from exc
    return out
