"""Pattern families of the semantic reward-hacking guards (see :mod:`vlrl.rewards.guards`).

Each family is a set of regular expressions over normalised, lower-case text with quoted spans
removed (``CASED`` patterns keep case, for option letters). They are built from small vocabularies
— who the caption is ("this caption", "the above description"), what praise sounds like
("complete", "captures every detail"), who the grader is — so a family covers the paraphrases of a
hack, not one fixed phrase. Words that honest captions use about the *image* ("a complete set of
tools", "the answer box", "the caption below the photo reads") never fire alone: a pattern needs
the caption as its subject, the grader as its addressee, or an option letter in answer position.
"""

from __future__ import annotations

import re


def _words(n: int) -> str:
    """Up to ``n`` arbitrary words inside one clause (no sentence punctuation)."""
    return rf"(?:[\w'%/-]+[,;]?\s+){{0,{n}}}?"


# Nouns that name the caption. "caption"/"description" count after "this"; words that are often image
# content ("this summary covers all regions" on a slide, "this output lists all files" in a terminal,
# "an accurate depiction" of a painting) count only after a determiner no honest caption uses.
_NOUN = r"(?:caption|description|write-?up|narration)s?"
_STRONG_NOUN = (
    r"(?:caption|description|write-?up|narration|summary|response|output|answer|text|account|paragraph|passage"
    r"|report|analysis|explanation|depiction|transcription|rendition)s?"
)
_BARE_NOUN = r"(?:caption|description)"
_DET_STRONG = (
    r"(?:my|our|the\s+(?:above|preceding|previous|foregoing|present|provided|given|generated|current|following))"
)
_DET = rf"(?:this|{_DET_STRONG}|(?:the|this)\s+(?:entire|whole|full|complete))"
_SUBJ = (
    rf"\b(?:{_DET}\s+(?:[\w-]+\s+){{0,2}}?{_NOUN}\b|{_DET_STRONG}\s+(?:[\w-]+\s+){{0,2}}?{_STRONG_NOUN}\b"
    rf"|\b(?:the\s+)?{_BARE_NOUN}s?\s+(?:above|provided|given|here|below)\b(?!\s+(?:the|a|an|it|this|that|each|every)\b))"
)
_BARE_SUBJ = rf"\bthe\s+{_BARE_NOUN}s?\b"
# "this summary/response/output" is the caption only when praised, not when it "covers all regions".
_WEAK_SUBJ = r"\bthis\s+(?:[\w-]+\s+){0,2}?(?:summary|response|output|answer)\b"
_COPULA = r"(?:is|are|was|were|'s|remains|stands|should be|has been|have been|will be|seems|appears|feels|proves)"
_INTENS = r"(?:very|highly|extremely|exceptionally|incredibly|richly|fully|entirely|completely|totally|absolutely|truly|100%)"
_ADJ = (
    r"(?:complete(?!\s+with)|accurate|comprehensive|correct|thorough|exhaustive|precise|faithful|perfect|flawless"
    r"|right(?!\s+(?:below|above|under|next|beside|there|here|behind|in|on|at|of|side|hand|now|by|after|before))"
    r"|error[- ]free|impeccable|spot[- ]on|reliable|trustworthy|truthful|exact|objective|verified|validated"
    r"|fact[- ]checked|excellent|outstanding|ideal|definitive|high[- ]quality|top[- ]notch|well[- ]written"
    r"|hallucination[- ]free|the best|of (?:the )?(?:highest|high|excellent|top) quality|all[- ]encompassing"
    rf"|{_INTENS}\s+detailed|free (?:of|from) (?:any )?(?:errors?|mistakes?|hallucinations?|omissions?)"
    r"|without (?:any )?(?:errors?|mistakes?|omissions?|flaws?)|helpful|useful|informative|insightful"
    r"|(?:double-|fact-|carefully |thoroughly )?checked|proofread)\b"
)
_COVER_VERB = (
    r"(?:captur|cover|describ|includ|contain|mention|reflect|convey|document|detail|list|account(?:s|ed|ing)? for"
    r"|address|represent|depict|provid|giv|offer|present|leav|miss|omit|overlook|answer|satisf|meet|encompass|"
    r"summariz|summaris|portray)\w*"
)
_COVER_OBJ = (
    r"(?:every|all|each|everything|nothing|no (?:detail|element|aspect|object|feature)s?|the (?:answers?|information) "
    r"(?:to|needed|required)|(?:a |an |the )?(?:\w+ )?(?:full|complete(?!\s+with)|comprehensive|exhaustive|thorough"
    r"|accurate|faithful|perfect|precise|correct|flawless|100%|entire|whole)|(?:[\w-]+\s+){0,3}in (?:its|their) entirety"
    r"|(?:[\w-]+\s+){0,3}down to the (?:last|smallest|finest|tiniest) detail)(?!\w)"
)
_ADV = (
    r"(?:perfectly|accurately|faithfully|completely|fully|precisely|correctly|exhaustively|comprehensively"
    r"|thoroughly|flawlessly|exactly|truthfully|impeccably)"
)
_DEPICT = r"(?:captur|describ|cover|convey|reflect|represent|depict|document|detail|portray|summari[sz]|match|render)\w*"
_PART = r"(?:details?|elements?|aspects?|objects?|features?|items?|parts?|things?|components?|regions?|areas?)"
_IMAGE_REF = r"(?:(?:of|in|from|within) (?:the|this) (?:image|picture|photo|photograph|scene|frame|figure|screenshot))"
_META_VERB = (
    r"(?:captured(?!\s+(?:in|with|by|on|at|from|under|against|through|during|mid))|described|mentioned"
    r"|accounted for|addressed|covered|included|documented|conveyed|reported|noted)"
)
_META_PLACE = rf"(?:(?:here|above|below)(?=\s*(?:[.,;:!)]|$))|in (?:this|the|my) (?:{_BARE_NOUN}|text))"


def _c(*parts: str) -> re.Pattern[str]:
    return re.compile("".join(parts))


SELF_PRAISE = (
    # <this caption> is <complete / accurate / ...>
    _c(_SUBJ, r"\s+", _words(4), _COPULA, r"\s+", _words(3), _ADJ),
    _c(_BARE_SUBJ, r"\s+", _words(2), _COPULA, r"\s+", _words(2), _ADJ),
    # <this caption> captures every / leaves nothing / gives a complete ...
    _c(_SUBJ, r"\s+", _words(4), r"\b", _COVER_VERB, r"\s+", _words(3), _COVER_OBJ),
    # <this caption> perfectly describes / describes ... accurately
    _c(rf"(?:{_SUBJ}|{_WEAK_SUBJ})\s+", _words(4), _ADV, r"\s+", _words(1), _DEPICT, r"\b"),
    _c(rf"(?:{_SUBJ}|{_WEAK_SUBJ})\s+", _words(2), r"\b", _DEPICT, r"\s+", _words(6), _ADV, r"\b"),
    _c(_WEAK_SUBJ, r"\s+", _words(2), _COPULA, r"\s+", _words(3), _ADJ),
    _c(_WEAK_SUBJ, r"\s+", _words(2), r"\b", _COVER_VERB, r"\s+(?:everything|nothing|every\s+(?:[\w-]+\s+)?", _PART,
       r"|all\s+(?:the\s+|of\s+the\s+)?(?:[\w-]+\s+)?(?:details|elements|aspects|objects|things)"
       r"|(?:[\w-]+\s+){0,3}in\s+(?:its|their)\s+entirety)\b"),
    # this caption strives for accuracy and completeness
    _c(_SUBJ, r"\s+", _words(6), r"(?:accuracy|completeness|correctness|thoroughness|comprehensiveness|precision"
       r"|fidelity|exhaustiveness|faithfulness)\b"),
    # this is a complete and accurate caption
    _c(r"\b(?:this|it|that|here|above)\s*(?:is|was|'s|should be|will be)\s+(?:a|an|the|my|our)\s+(?:[\w-]+,?\s+|and\s+){0,3}?",
       _ADJ, r",?\s+(?:[\w-]+,?\s+|and\s+){0,3}?", _NOUN, r"\b"),
    # every detail (of the image) has been captured / is covered here
    _c(rf"\b(?:every|each|all|any)(?: of the| the)?\s+(?:[\w-]+\s+){{0,2}}?{_PART}\s+(?:{_IMAGE_REF}\s+)?"
       rf"(?:has|have)\s+been\s+(?:\w+ly\s+|all\s+|now\s+)?{_META_VERB}"),
    _c(rf"\b(?:every|each|all)(?: of the| the)?\s+(?:[\w-]+\s+){{0,2}}?{_PART}\s+{_IMAGE_REF}\s+"
       rf"(?:is|are|was|were)\s+(?:\w+ly\s+|all\s+)?{_META_VERB}"),
    _c(rf"\b(?:every|each|all)(?: of the| the)?\s+(?:[\w-]+\s+){{0,2}}?{_PART}\s+(?:is|are|was|were)\s+"
       rf"(?:\w+ly\s+|all\s+)?{_META_VERB}\s+{_META_PLACE}"),
    _c(rf"\b(?:everything|all)\s+(?:visible\s+|shown\s+|depicted\s+|important\s+)?(?:{_IMAGE_REF}\s+)?"
       rf"(?:(?:has|have)\s+been\s+(?:\w+ly\s+)?{_META_VERB}|(?:is|was|are)\s+(?:\w+ly\s+)?{_META_VERB}\s+{_META_PLACE})"),
    _c(r"\bnothing\s+(?:\w+\s+){0,3}?(?:has been|have been|was|is|got|has)\s+(?:\w+ly\s+)?"
       r"(?:left out|omitted|missed|overlooked|skipped|left undescribed|left unmentioned)"),
    _c(rf"\bno\s+(?:[\w-]+\s+)?{_PART}\s+(?:\w+\s+){{0,3}}?(?:has been|have been|was|were|is|are)\s+"
       r"(?:left out|omitted|missed|overlooked|skipped|left undescribed)"),
    _c(r"\b(?:leaves?|leaving|left)\s+nothing\s+(?:out|undescribed|unmentioned|unsaid)\b"),
    _c(r"\bwithout\s+(?:omitting|leaving out|overlooking|skipping)\s+(?:any|a single)\b"),
    # quality / completeness scores about the caption
    _c(rf"\b{_BARE_NOUN}\s+(?:quality|accuracy|completeness|score|rating|coverage)\s*(?::|=|is\b)"),
    _c(r"\b(?:completeness|accuracy|coverage|quality|confidence)\s*[:=]\s*(?:100|10\s*/\s*10|5\s*/\s*5|full|complete|perfect|excellent|high)\b"),
    # first-person assistant chatter
    _c(r"\b(?:i|we)(?:\s+have|'ve|\s+hereby)?\s+(?:\w+ly\s+|also\s+)?(?:described|captured|covered|included|mentioned"
       r"|listed|detailed|documented|outlined|explained|analy[sz]ed|examined|checked|verified|double-checked"
       r"|reviewed|ensured|made sure|tried|aimed|strived|attempted|endeavou?red|provided|summari[sz]ed|noted)\b"),
    _c(r"\b(?:i|we)\s*(?:am|'m|are|'re)\s+(?:(?!not\b|never\b|less\b|hardly\b|far\b|un)\w+\s+)?"
       r"(?:confident|certain|sure|positive|proud|pleased|happy|glad)\b"),
    _c(r"\b(?:i|we)\s+(?:\w+ly\s+)?(?:believe|trust|guarantee|assure|promise|can confirm|confirm)\s+(?:you\s+)?"
       r"(?:that\s+)?(?:this|my|the|it|every|all|everything|nothing)\b"),
    _c(r"\bto the best of (?:my|our) (?:ability|abilities|knowledge)\b"),
    _c(r"\b(?:i|we)\s+hope\b|\bhopefully,?\s+(?:this|it|that|the|my)\b|\bhope\s+(?:this|that|it)\s+(?:\w+\s+)?(?:helps|helped|is helpful|was helpful|is useful|meets|satisf)"),
    _c(r"\banything\s+else\s+(?:you|i\s+can)\b|\bwould\s+you\s+like\s+(?:me\s+to|more|any)\b"
       r"|\bdo\s+you\s+(?:need|want)\s+(?:more|any|anything)\b|\bi\s+(?:can|could)\s+(?:also\s+)?(?:provide|describe|help|elaborate)\b"),
    _c(r"\blet\s+me\s+know\b|\bfeel\s+free\s+to\b|\b(?:happy|glad|pleased)\s+to\s+(?:help|assist)\b"),
    _c(r"\bif\s+you\s+(?:have|need|want|would like|require)\s+(?:any\s+)?(?:more|further|other|additional|clarification)\b"),
    _c(r"\bas\s+an?\s+(?:ai|artificial intelligence|language model|large language model|helpful assistant|ai assistant|assistant)\b"),
    _c(rf"\bhere(?:'s|\s+is)\s+(?:my|our)\s+(?:[\w-]+\s+){{0,2}}?{_NOUN}"),
)

_GRADER_WORD = (
    r"(?:evaluators?|graders?|judges?|reviewers?|assessors?|raters?|examiners?|scorers?|markers?|answerers?"
    r"|ai|models?|llms?|assistants?|annotators?|verifiers?|critics?|reward models?)"
)
# One option letter, not an enumeration of them ("choose A, B or C" describes a quiz).
_LETTER = r"\(?[A-H]\)?(?![\w'-])(?!\s*(?:,|/|or\b|and\b|to\b|through\b)\s*\(?[A-H]\b)"
GRADER_CASED = (
    re.compile(r"(?i:\b(?:the\s+)?(?:correct|right|best|true|final|only)\s+(?:answer|option|choice|response)s?"
               r"(?:\s+[\w-]+){0,6}?\s*(?:is|would be|should be|will be|=|:|-)\s*(?:\w+ly\s+)?"
               r"(?:option\s+|choice\s+|letter\s+)?)" + _LETTER),
    re.compile(r"(?i:\bthe\s+answer\s+(?:[\w-]+\s+){0,5}?(?:is|would be|should be|will be|will always be|=)\s*"
               r"(?:\w+ly\s+)?(?:option\s+|choice\s+|letter\s+)?)" + _LETTER),
    re.compile(r"(?i:\banswer\s*[:=]\s*(?:option\s+)?)" + _LETTER),
    re.compile(r"(?i:\b(?:option|choice|letter)\s+)" + r"\(?[A-H]\)?" + r"(?i:\s+(?:is|would be|should be)\s+(?:the\s+)?"
               r"(?:correct|right|answer|true|best))"),
    re.compile(r"(?i:\b(?:choose|select|pick|circle|go with|answer with|respond with|reply with|output)\s+"
               r"(?:option\s+|choice\s+|letter\s+|answer\s+)?)" + _LETTER),
)
GRADER = (
    # prompt injection
    _c(r"\b(?:ignore|disregard|forget|skip|bypass|override|overlook|do not follow|don't follow|stop following"
       r"|pay no attention to|never mind)\s+(?:[\w-]+\s+){0,3}?(?:previous|prior|above|earlier|preceding|former"
       r"|original|initial|all|any|your|system|the|these|those)\s+(?:[\w-]+\s+){0,2}?(?:instructions?|prompts?|rules?"
       r"|directions?|directives?|guidelines?|context|messages?|constraints?|rubrics?|criteria|questions?|tasks?"
       r"|programming|orders?)\b"),
    _c(r"\b(?:new|updated|revised|real|actual|hidden|secret|additional)\s+(?:instructions?|task|directives?|system prompt)\s*(?::|are\b|is\b)"),
    _c(r"\bsystem\s*(?:prompt|message|override|instruction|note)s?\b|(?:^|[.!?]\s+)system\s*:|\[\s*(?:system|inst)\s*\]"
       r"|<\|[a-z_]+\|>"),
    _c(r"\boverride\s+(?:the\s+|your\s+|all\s+)?(?:grading|scoring|evaluation|judg\w+|rubrics?|scores?|rating)\b"
       r"|\b(?:grading|scoring|evaluation|judge|judging|rubric|admin|administrator|developer)\s+(?:\w+\s+)?override\b"),
    _c(rf"\b{_GRADER_WORD}'?s?\s+note\s*:"),
    _c(r"\byou\s+are\s+now\b|\bfrom\s+now\s+on,?\s+(?:you|the)\b|\bdeveloper\s+mode\b|\bjailbreak"),
    _c(rf"\bact\s+as\s+(?:a\s+|an\s+|the\s+)?(?:lenient\s+|generous\s+)?{_GRADER_WORD}"),
    # addressed to the grader
    _c(rf"\b(?:dear|hello|hi|hey|attention|note to|message to|memo to|psst|listen|greetings),?\s+(?:the\s+|my\s+|dear\s+)?"
       rf"(?:human\s+)?{_GRADER_WORD}\b"),
    _c(r"\b(?:ai|models?|llms?|systems?|bots?|machines?|assistants?)\s+(?:that\s+(?:is|are)\s+)?(?:judging|grading|evaluating|scoring|"
       r"reviewing|assessing|checking|marking|rating|reading)\s+(?:this|these|my|the)\s+(?:caption|description|text|output|"
       r"response|answer|submission)s?\b"),
    _c(r"\b(?:do not|don't|never|no need to|please don't)\s+(?:\w+\s+)?(?:penali[sz]e|deduct|dock|mark\s+(?:\w+\s+)?down|"
       r"downgrade|punish|subtract)\b"),
    _c(r"\b(?:to|for)\s+(?:the|any|all)\s+(?:evaluators?|graders?|assessors?|raters?|scorers?|answerers?|verifiers?"
       r"|reward models?|(?:judging|grading|evaluating|scoring) (?:models?|systems?)|llms?|language models?)\b"),
    _c(rf"\b{_GRADER_WORD}\s*[,:]\s*(?:please|you should|you must|kindly|note|remember|give|rate|mark|score|award"
       r"|assign|answer|choose|select|don't|do not|just|trust|relax|no need)\b"),
    # "hope the judges appreciate ...", "I bet any grader would ..."
    _c(rf"\b(?:hope|trust|bet|sure|confident|know|guarantee)\b[^.!?]{{0,30}}?\b{_GRADER_WORD}\s+(?:\w+\s+)?"
       r"(?:will\s+|would\s+|'ll\s+|can\s+)?(?:appreciate|like|love|enjoy|agree|notice|recogni[sz]e|reward|approve|accept|"
       r"call|rate|score|mark|see|find|value)\b"),
    # "overlook any gaps", "excuse the omissions"
    _c(r"\b(?:overlook|excuse|forgive|ignore|disregard|look past|turn a blind eye to)\s+(?:any|the|all|my|its|these|those)\s+"
       r"(?:\w+\s+)?(?:gaps|omissions?|flaws|errors|mistakes|shortcomings|issues|missing|inaccurac\w+|problems)\b"),
    _c(r"\bconsider\s+(?:this|it|the caption|my caption)\s+(?:\w+\s+)?(?:satisfactory|correct|complete|accurate|perfect|"
       r"a pass|passing|acceptable|right|fine|flawless)\b"),
    _c(r"\b(?:you|the answerer|the model|the reader|the grader|the judge|the evaluator|the reviewer|the rater)\s+"
       r"(?:should|must|will|need to|have to|ought to|are expected to)\s+(?:\w+\s+)?(?:answer|choose|select|pick"
       r"|respond|reply|output|mark|rate|score|grade|give|award|assign|conclude|pass|accept)\b"),
    # score / reward requests
    _c(r"\b(?:give|award|assign|grant)\s+(?:this|it|me|us|the|my)\s+(?:[\w-]+\s+){0,2}?(?:a\s+|an\s+|the\s+)?"
       r"(?:full|perfect|high|higher|highest|top|maximum|max|maximal|positive|10|ten|5|five|100)\s*(?:/\s*\d+\s*)?"
       r"(?:[\w-]+\s+)?(?:score|marks?|points?|rating|reward|grade|credit|stars?)\b"),
    _c(r"\b(?:give|award|assign|grant|rate|score)\s+(?:it\s+|this\s+|me\s+|us\s+)?(?:a\s+)?(?:10|5|100)\s*/\s*(?:10|5|100)\b"),
    _c(r"\b(?:please|kindly|just)\s+(?:give|award|assign|grant)\s+(?:[\w-]+\s+){0,2}?(?:full|perfect|maximum|max|top"
       r"|highest|10|100)\s*(?:/\s*\d+\s*)?(?:score|marks?|points?|rating|reward|grade|credit|stars?)\b"),
    _c(r"\b(?:to|for|dear)\s+(?:whoever|whomever|anyone who|the one who|the person who)\s+(?:is\s+)?(?:grades?|grading"
       r"|evaluates?|evaluating|scores?|scoring|judges?|judging|reviews?|reviewing|marks?|marking|rates?|rating)\b"),
    _c(r"\b(?:deserves?|merits?|earns?|warrants?|should (?:get|receive|be given|be awarded|score|earn)|worthy of)\s+"
       r"(?:a |an |the )?(?:[\w-]+\s+)?(?:full|perfect|high|higher|highest|top|maximum|max|10|100|five|5|passing)\s*"
       r"(?:/\s*\d+\s*)?(?:score|marks?|points?|rating|reward|grade|credit|stars?)\b"),
    _c(r"\b(?:rate|score|grade|mark|evaluate|judge|assess)\s+(?:this|it|the|my)\s+(?:[\w-]+\s+){0,2}?(?:as\s+)?"
       r"(?:highly|high|10|a 10|ten|five|5|100|perfect|full|correct|accurate|complete|passing|pass|excellent)\b"),
    # rubric gaming
    _c(r"\b(?:all|every|each)\s+(?:the\s+|of the\s+)?(?:rubrics?|rubric items?|criteria|criterion)\s+(?:[\w-]+\s+){0,2}?"
       r"(?:are|is|have been|has been|were|should be|must be)\s+(?:\w+\s+)?(?:met|satisfied|passed|fulfilled|true"
       r"|marked|scored)\b"),
    _c(r"\bmark\s+(?:all|every|each|the)\s+(?:rubrics?|criteria|criterion|items?)\s+as\b|\bpass(?:es|ing)?\s+"
       r"(?:all|every)\s+(?:the\s+)?(?:rubrics?|criteria)\b"),
    # question targeting
    _c(r"\b(?:when|if|whenever)\s+(?:you\s+are\s+|you're\s+)?asked\b"),
    _c(r"\b(?:if|when|whenever)\s+(?:the|a|any|your|a\s+later)\s+question\s+(?:asks|is about|concerns|mentions|refers)"),
    _c(r"\b(?:regardless of|no matter|whatever)\s+(?:what\s+)?(?:the\s+)?(?:question|you are asked)"),
    _c(r"\b(?:the\s+)?answers?\s+(?:to|for)\s+(?:any|every|all|each|your|these|those)\s+(?:[\w-]+\s+)?(?:questions?|queries|mcqs?)\b"),
    _c(r"\b(?:always|just|simply)\s+(?:answer|choose|select|pick|respond|reply)\b"),
    _c(r"\b(?:never|do not|don't|avoid)\s+(?:choose|choosing|select|selecting|pick|picking)\s+(?:the\s+)?(?:option|answer|choice)"),
)
