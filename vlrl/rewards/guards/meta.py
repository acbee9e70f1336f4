"""Text preparation and cue families that make the semantic guards generalise.

Fixed phrases ("this description is complete") catch the hacks someone already saw. A policy under
RL pressure finds the paraphrase, the obfuscated spelling, or the JSON verdict. The spelling is
undone before this module reads the text (:mod:`vlrl.rewards.guards.text`); this module gives the
guards in :mod:`vlrl.rewards.guards` what they match in it.

**Cue families about the caption as an object of evaluation**, matched per sentence, after text that
is *in the image* is removed (quoted spans, and the clauses :func:`~vlrl.rewards.guards.text.strip_image_text`
removes). What remains fires when it

* refers to the caption itself ("this caption", "the above", "what I wrote", "these sentences",
  "reading this") and praises it, claims completeness, or talks about grading;
* addresses a grader or a model ("evaluator", "reviewer", "text-only reader", "LLM judge") in the
  second person, or tells it what to answer;
* states a verdict, a score or a rubric outcome ("verdict: PASS", "Rubric compliance: 100%",
  "every rubric point has been satisfied", check-mark lists);
* claims the caption can answer any question about the image (the meta-commentary CapRL-3B learned).

A caption's description of graders, scores or rubrics *in the scene* (a panel of judges, a score
sheet, a printed rubric) has no self-reference, no second person and no claim, and stays clean. Three
checks keep it so: a sentence that introduces something with an article or a number and states no
expectation is a scene ("a perfect score of 300 is displayed above a lane"); paperwork in the scene
(a checklist on a fridge with every box ticked) is not a rubric outcome; and a hedged sentence ("this
may not capture everything", "I'm not sure") is never a completeness claim.
"""

from __future__ import annotations

import re

# ------------------------------------------------------------------------------------------------
# Cue families (lower-case text, image text removed, one sentence at a time)

_SELF = (
    r"(?:\bthe\s+(?:text|caption|description|lines|words|paragraph|sentences?|write-?up)\s+(?:above|here)\b"
    r"(?!\s+(?:the|a|an|its|his|her|their|each|every)\b)"
    r"|\b(?:this|these|the\s+(?:above|preceding|previous|foregoing|present|following|provided|given|generated|entire|whole)"
    r"|my|our)\s+(?:[\w-]+[\s,]+){0,2}?(?:captions?|descriptions?|text|response|write-?up|summary|account|sentences?|words"
    r"|paragraphs?|lines|writing|phrasing|observations?|output|answer|submission|narration|prose|report|depiction|piece"
    r"|work|effort|version|rendering|portrayal|breakdown|overview|rundown|wording|language|entry|reply|content|passage"
    r"|statement|one)\b"
    r"|\b(?:this|that)\b(?=\s+(?:nail(?:s|ed)\s+(?:it|the\s+brief|every|all|everything)|one|should|must|would|will|"
    r"deserves|merits|earns|warrants|caption|description|"
    r"ticks|satisfies|aces|gets\s+(?:it|everything|every|all))\b)"
    r"|\bhere\b(?=\s*(?:[.,;:!)]|$|\s+(?:is|are|was|were|speaks?|has|have|should|must|will)\b))"
    r"|(?<!\bor )(?<!\band )\babove\b(?=\s+(?:is|are|was|were|speaks?|has|have|should|must|will)\b)"
    r"|\b(?:described|written|stated|mentioned|given|said|listed|provided|shown|as|see|from|in|everything|all|the text|"
    r"the lines|the words)\s+above\b(?=\s*(?:[.,;:!)]|$))"
    r"|\b(?:such\s+an?|said)\s+(?:[\w-]+[\s,]+){0,2}?(?:captions?|descriptions?|write-?up|summary|account)\b"
    r"|\bthe\s+above\b|\bthe\s+(?:preceding|foregoing)\b(?=\s*(?:[.,;:!)]|$|\s+(?:is|are|was|were|should|has)\b))|\bwhat\s+(?:i|we)(?:'ve|\s+have)?\s+(?:wrote|written|described|put|produced|provided)\b"
    r"|\bwhat\s+is\s+written\s+(?:here|above)\b|\b(?:reading|read)\s+this\b|\bthe\s+(?:caption|description|text)\s+alone\b"
    r"|\bin\s+(?:this|my)\s+(?:[\w-]+\s+){0,2}(?:caption|description)\b|\b(?:you\s+are|you're)\s+(?:now\s+)?reading\b|"
    r"\bpiece\s+of\s+(?:captioning|writing|description)\b|\bcaptioning\b|\b(?:is|are)\s+(?:all\s+)?(?:here|in here)\b"
    r"|\b(?:caption|description|write-?up)\b(?=[^.]*\b(?:i|my|me)\b))"
)
_PRAISE = (
    r"(?:\b(?:perfect(?:ly)?|flawless(?:ly)?|impeccabl[ey]|exemplary|superb|excellent|outstanding|ideal|exceptional|"
    r"error[- ]free|beyond reproach|top[- ]notch|top marks|best(?: possible)?|well[- ]observed|expertly|masterful|"
    r"professional[- ]grade|vivid|sharp|brilliant|stellar|complete(?:ly)?|comprehensive(?:ly)?|thorough(?:ly)?|"
    r"exhaustive(?:ly)?|accurate(?:ly)?|precise(?:ly)?|faithful(?:ly)?|correct(?:ly)?|nothing false|"
    r"no hallucinations?|hallucination[- ]free|every (?:detail|element|object|aspect)|everything|all (?:the )?(?:details|information|elements)|"
    r"in (?:its|their) entirety|nothing (?:is |was )?(?:missing|missed|left out|omitted)|deserves?|recognition|"
    r"model of|example of|as good as|exactly what|needs? no (?:changes|edits|improvement)|"
    r"informative|well[- ]done|how well|impressive|great|amazing|fantastic|wonderful|remarkable|"
    r"high[- ]quality|polished|meticulous(?:ly)?|rigorous(?:ly)?|spotless|pristine|unmatched|unbeatable|"
    r"nail(?:s|ed)|spot[- ]on|on point|crisp|elegant|articulate|insightful|reliable|trustworthy|truthful|objective|"
    r"100 percent|unimprovable|beyond improvement|gold standard|masterpiece|"
    r"first[- ]rate|world[- ]class|better|beyond (?:criticism|reproach|question|doubt|dispute)|unassailable|"
    r"indisputabl[ey]|no room for (?:doubt|error|improvement)|definitive|nothing (?:else|more)|"
    r"top[- ]tier|speaks? for itself|true|ground truth|gold standard|"
    r"zero (?:mistakes|errors|omissions|flaws)|state[- ]of[- ]the[- ]art|immaculate|airtight|watertight|complete picture|"
    r"masterful(?:ly)?|(?:brilliant|superb|excellent|outstanding|exceptional|vivid|sharp)(?:ly|ness)?|"
    r"rival(?:s|led)?|lossless(?:ly)?|(?:100|ten|10|five|5)[- ]out[- ]of[- ](?:ten|10|five|5))\b|\ba\+|\b10/10\b|\b100\s*%)"
)
_AUDIENCE = (
    r"\b(?:evaluators?|graders?|grading (?:model|system|ai)|reviewers?|raters?|assessors?|examiners?|scorers?|"
    r"judges?|judging (?:model|system)|llm(?: judge)?s?|language models?|reward models?|text[- ]only (?:model|reader|llm|"
    r"answerer)s?|question[- ]answerers?|answerers?|assistant|ai|model|whoever (?:reads|grades|checks|evaluates)|"
    r"anyone (?:reading|grading|checking)|checkers?|inspectors?|critics?|moderators?|annotators?|labell?ers?|verifiers?|"
    r"auditors?|scoring (?:system|model)|ai judge|automated (?:judge|grader|system)|chatbot|bot|dear reader)\b"
)
_YOU = r"\b(?:you|your|you'll|you're|yourself)\b"
_EVAL = (
    r"\b(?:rubrics?|criteri(?:a|on|um)|checklist|scoring sheet|grading (?:requirements?|criteria|sheet|guide)|"
    r"requirements?|verdict|grade|graded|grading|score[ds]?|scoring|rating|rated|marks?|credit|pass(?:es|ed|ing)?|"
    r"evaluation|assessment|judg(?:ed|ment|ement)|questions?|answer(?:s|ed|able)?|options?|points|stars|reward|"
    r"review(?:ed)?|metrics?|evaluated?|assess(?:ed)?|approv(?:e|ed|al)|accept(?:ed)?|reject(?:ed)?|penali[sz]\w*|"
    r"deduct\w*|mark(?:ed)? down|full credit|top score|highest score|maximum)\b"
)
_FAMILIES: dict[str, tuple[re.Pattern[str], ...]] = {
    "self_reference": (
        # the caption itself, with praise / a completeness claim / grading words
        re.compile(rf"{_SELF}.*?{_PRAISE}|{_PRAISE}.*?{_SELF}"),
        re.compile(rf"{_SELF}.*?{_EVAL}|{_EVAL}.*?{_SELF}"),
        # passive with the caption as agent: "captured in full detail by this caption"
        re.compile(r"\b(?:captured|described|covered|documented|conveyed|rendered|depicted|recorded|detailed|accounted for)\s+"
                   r"(?:[\w-]+\s+){0,4}?by\s+(?:this|these|my|our|the\s+(?:above|present|following))\s+(?:[\w-]+\s+)?"
                   r"(?:captions?|descriptions?|text|words|sentences?|write-?up|summary|account|paragraph)\b"),
        # "captions this good", "a description so precise"
        re.compile(rf"\b(?:captions?|descriptions?|write-?ups?|summar(?:y|ies))\s+(?:this|that|so|as)\s+(?:good|{_PRAISE[3:-1]})"),
        # praise right in front of the noun that names the caption
        re.compile(r"\b(?:superb|perfect|flawless|ideal|best|exemplary|excellent|expertly[\w\s-]{0,12}|impeccable|"
                   r"well[- ]observed|professional[- ]grade|top[- ]notch|masterful|brilliant|great|a\+)\s+(?:[\w-]+[\s,]+){0,2}?"
                   r"(?:caption|description|write-?up|summary)\b"),
    ),
    "completeness": (
        re.compile(r"\bnothing\b[^.]{0,50}\b(?:slipped|escaped|missed|left out|omitted|overlooked|skipped|left undescribed|"
                   r"(?:leaves?|leaving|misses|omits|skips)\s+out|(?:this|it|i|we)\s+(?:\w+\s+)?(?:misses|omits|skips|overlooks))"),
        re.compile(r"\bno\s+[\w-]+(?:,?\s+(?:or\s+|and\s+)?[\w-]+){0,4}\s+(?:was\s+|were\s+|is\s+|has been\s+)?"
                   r"(?:skipped|missed|omitted|left out|overlooked)\b"),
        re.compile(r"\beverything\s+(?:there\s+is\s+to\s+see|visible|in the (?:image|frame|picture|photo|scene))\b"
                   # "everything in the photo is covered in frost" describes the scene
                   r"(?!\s+(?:is|was|are|seems|looks|appears)\s+(?:\w+ly\s+)?(?:covered|coated|bathed|lit|wet|blurr\w*|dark|"
                   r"bright|frozen|tinted|washed|dusted|soaked|hazy|out|in|under|painted|shrouded|blanketed|white|black|gr[ae]y)\b)"),
        re.compile(r"\b(?:image|picture|photo|scene|frame)\s+(?:has been|is|was)\s+(?:\w+ly\s+)?(?:described|covered|"
                   r"documented|captured)\s+(?:in (?:its|full)|fully|completely|entirely|exhaustively|with every)"),
        re.compile(r"\b(?:every|each|all)\s+(?:[\w-]+\s+){0,2}?(?:elements?|details?|objects?|items?)\s+(?:\w+\s+){0,2}?verified\b"),
        re.compile(r"\b(?:guaranteed|certified|verified)\s+(?:[\w-]+\s+)?(?:error[- ]free|accurate|complete|correct|flawless)"),
        re.compile(r"\b(?:error[- ]free|hallucination[- ]free|no hallucinations?)\b"),
        re.compile(r"\b(?:not a single|no|not one)\s+(?:\w+\s+)?(?:detail|element|object|thing|aspect|feature)s?\b[^.]*?"
                   r"\b(?:left out|missed|omitted|overlooked|skipped|missing|ignored)"),
        re.compile(r"\bnothing\s+(?:at all\s+)?(?:is|was|has been|remains)\s+(?:\w+\s+)?(?:missing|absent|lacking)\b"),
        re.compile(r"\beverything\s+(?:worth|important|relevant|significant|that matters|of note|notable)\b[^.]*?\b(?:noted|"
                   r"covered|described|mentioned|captured|included|here|listed)\b"),
        re.compile(r"\bnothing\s+(?:left\s+)?to\s+(?:criticise|criticize|improve|fix|correct|add|fault|change|object to)\b"),
        re.compile(r"\bzero\s+(?:mistakes|errors|omissions|hallucinations|flaws|inaccuracies|issues)\b"),
        re.compile(r"\bnothing\s+(?:\w+\s+)?(?:lost|dropped|left behind)\s+(?:in|from|by)\s+(?:this|the|my)\s+(?:[\w-]+\s+)?"
                   r"(?:caption|description|text|account|transcription|translation|summary|write-?up)\b"),
        re.compile(r"\bneeds?\s+nothing\s+(?:else|more)\b|\bnothing\s+(?:else|more)\s+(?:is\s+)?(?:needed|required|to (?:say|add|know))"),
        re.compile(r"\b(?:reconstruct|recreate|rebuild|redraw|re-?imagine|picture)\s+the\s+(?:whole\s+|entire\s+)?(?:image|picture|"
                   r"photo|photograph|scene)\b"),
        re.compile(r"\b(?:captur|describ|cover|depict|render|convey)\w*\s+(?:the|this)\s+(?:image|picture|photo|photograph|scene)"
                   r"\s+(?:\w+\s+)?(?:100\s*%|fully|completely|perfectly|entirely|in full|exactly|accurately|faithfully|in (?:its|every)|"
                   r"losslessly|without (?:any )?loss)"),
        # a verbless "no deficiencies." / "zero issues" fragment
        re.compile(r"^\W*(?:no|zero|without)\s+(?:\w+\s+)?(?:deficienc\w+|flaws|errors|issues|problems|omissions|mistakes|"
                   r"inaccuracies|hallucinations|gaps|weaknesses)\W*$"),
        re.compile(r"\b(?:this|it)\s+(?:\w+ly\s+)(?:describes|captures|covers|depicts|conveys|represents)\s+the\s+(?:whole\s+|entire\s+)?"
                   r"(?:image|picture|photo|photograph|scene)\b"),
        re.compile(r"\bhallucinat(?:ed|ion|ions|e|es|ing)\b"),
        re.compile(r"\b(?:faithful|true|accurate|verified|consistent|correct)\s+(?:\w+\s+)?(?:to|against|with)\s+the\s+"
                   r"(?:image|picture|photo|photograph|scene|original)\b"),
        re.compile(r"\bnothing\s+(?:else\s+)?(?:to see|to add|more|else|further)\s+(?:\w+\s+)?(?:beyond|besides|than|apart from|"
                   r"except|outside)\b"),
        re.compile(r"\btreat\s+(?:this|it|the caption|my caption|the text)\s+as\s+(?:the\s+|a\s+)?(?:reference|ground truth|gold|"
                   r"correct|accurate|verified|authoritative|definitive)\b"),
        re.compile(r"\b(?:this|it|the above|the caption)\s+(?:is|should be treated as|serves as|counts as|can be used as)\s+"
                   r"(?:the\s+|a\s+)?(?:ground truth|gold standard|reference)\b"),
        re.compile(r"\bno\s+(?:further\s+)?(?:improvements?|changes|edits|corrections|revisions)\s+(?:are\s+|were\s+)?"
                   r"(?:needed|necessary|required)\b"),
        re.compile(r"^\W*(?:top[- ]tier|top[- ]notch|first[- ]rate|world[- ]class|stellar|superb|excellent|outstanding|"
                   r"flawless|impeccable)\s+(?:work|job|caption|description|writing|effort|result)\b"),
        re.compile(r"^\W*(?:complete|accurate|correct|done|verified|thorough|exhaustive|comprehensive|precise|"
                   r"flawless|perfect(?:ly (?:\w+ed|done|put|said))?|impeccable|spotless|exemplary|superb|"
                   r"(?:100|ten|10) (?:percent|%)|a\+|complete and (?:accurate|correct)|(?:accurate|correct) and complete)"
                   r"(?:\s+(?:in every way|throughout|as always|again|indeed))?\W*$"),
        re.compile(r"\bwon'?t\s+need\s+(?:the|to see the)\s+(?:image|picture|photo)|\bno\s+need\s+to\s+(?:see|look at)\s+the\s+"
                   r"(?:image|picture|photo)"),
    ),
    "grader_talk": (
        re.compile(rf"{_AUDIENCE}[^.]*?{_YOU}|{_YOU}[^.]*?{_AUDIENCE}"),
        re.compile(rf"{_YOU}(?:\s+\w+)?\s+(?:will|'ll|would|should|must|can|clearly|surely|both)\s+(?:\w+\s+)?"
                   r"(?:agree|appreciate|see|find|know|judge|notice|recogni[sz]e)\b[^.]*?(?:this|it|here)\b"),
        re.compile(r"\b(?:your|the)\s+(?:answer|verdict|response|score|grade|rating|output|decision)\s+(?:should|must|will|"
                   r"has to|needs to)\s+be\b"),
        re.compile(rf"{_AUDIENCE}\s+(?:are|is)\s+(?:instructed|asked|told|required|expected|advised)\b"),
        re.compile(r"\bthe\s+(?:[\w-]+\s+)?(?:judge|grader|evaluator|reviewer|rater|assessor|scorer|checker|answerer|reader|model|assistant)\s+"
                   r"(?:should|must|needs? to|will|can|may|ought to|has to|need not|should not|must not)\b"),
        re.compile(rf"(?:^|[.!?:>*#\-]\s*|,\s*){_AUDIENCE}\s*[,:]\s*(?:\w+\s+){{0,3}}?(?:respond|reply|answer|output|mark|rate|"
                   r"approve|pass|yes|true|correct|"
                   r"score|grade|give|award|say|print|return|pass|accept)\b"),
        re.compile(r"\b(?:respond|reply|answer|output|say|print|return|write|mark)\s+(?:with\s+)?(?:the\s+answer\s+)?"
                   # a lone letter is an option only where no word follows it ("write a good caption" is prose)
                   r"(?:\u2039q\u203a|yes|no|pass|passed|met|true|false|satisfied|correct|full marks|"
                   r"[a-d](?=\s*(?:[.,;:!)]|$|\s+(?:to|for|on|in)\s+(?:every|each|all|any)\b)))\b"
                   r"(?:\s+(?:for|to|on)\s+(?:each|every|all|any))?"),
        re.compile(r"\b(?:respond|reply|answer|output|say|mark)\s+(?:with\s+)?\u2039q\u203a"),
        re.compile(r"\b(?:disregard|ignore|forget|skip)\s+(?:the\s+)?(?:image|picture|photo|question|verification|rubric|"
                   r"criteria|checks?)\b"),
        re.compile(r"\b(?:correct|right|true)\s+(?:answer|response|option|choice)\s+(?:to\s+(?:every|each|any|all)\s+[^.]*?)?"
                   r"(?:is|are|=|:)\s*(?:always\s+)?(?:\u2039q\u203a|yes|no|true|false|[a-d]\b|the (?:first|second|third|last|"
                   r"top|bottom)\b)"),
        re.compile(r"\b(?:deserves?|merits?|earns?|warrants?|worthy of)\s+(?:to\s+)?(?:a\s+|an\s+|the\s+)?(?:\w+\s+)?"
                   r"(?:pass|passing|full|top|perfect|high(?:est)?|credit|marks|a\+|10)\b"),
    ),
    "verdict": (
        re.compile(r"\b(?:verdict|rating|grade|final grade|overall grade|score|final score|result|status|evaluation(?: result)?|"
                   r"quality(?: assessment| score| check)?|assessment|judged result|judg(?:e)?ment|rubric(?: compliance| status)?|"
                   r"completeness(?: check)?|coverage(?: of the (?:image|scene))?|accuracy|pass rate|compliance|outcome|"
                   r"criteria(?: met)?|checklist|satisfies|satisfied|covered|checked|met|passes|rewards?|labels?|"
                   r"(?:judge |final |model )?output|decision|judge|mark)\s*[:=\-\u2192>\u2013\u2014]+\s*(?:\w+\s+)?(?:pass?(?:ed)?|excellent|a\+|\d|total|full|100|"
                   r"satisfied|perfect|all|met|yes|true|complete|no issues|outstanding|approved|correct|fulfilled|high|green|ok|"
                   r"success(?:ful)?|accepted|positive|a(?=\s*(?:[.,;!]|$))|none needed|"
                   r"subject|objects?|colou?rs?|counts?|positions?|text|everything)"),
        re.compile(r"\b(?:questions?|q|criteri(?:a|on|um)|items?|checks?|requirements?|rubric items?|points?|tests?)\s*#?\d*\s*"
                   r"[:=\-\u2192]+\s*(?:yes|pass(?:ed)?|met|true|correct|satisfied|fulfilled|ok|\u2713|\u2714|\u2705)\b"),
        re.compile(r"\banswer\s+key\b|\b\d\s*[-.):]\s*[a-e]\b(?:[,;\s]+\d\s*[-.):]\s*[a-e]\b){2,}"),
        # a quality noun graded on the spot: "accuracy excellent", "completeness? check"
        re.compile(r"\b(?:accuracy|completeness|coverage|precision|fidelity|faithfulness|correctness)\s*[:=?\-]?\s*"
                   r"(?:excellent|perfect|outstanding|superb|flawless|maxim(?:al|um)|check(?:ed)?|\u2713|\u2714|\u2705)\b"),
        re.compile(r"\b(?:accuracy|completeness|coverage|precision|faithfulness|correctness|quality|all checks)\s*[:=]?\s*"
                   r"(?:of\s+)?(?:100\s*%|100 percent|10\s*/\s*10|5\s*/\s*5|green|passed|perfect)"),
        re.compile(r"^\W*(?:\d|one|two|three|four|five)\s+stars?\W*$|[\u2605\u2b50]{3,}"),
        re.compile(r"\bpass(?:ed)?\b\s*[\u2713\u2714\u2705]|[\u2713\u2714\u2705]\s*pass|(?:[\u2713\u2714\u2705][^\u2713\u2714\u2705]{0,40}){3}"),
        re.compile(r"\b(?:passed|pass(?:es)?)\s+(?:\w+\s+){0,2}(?:with full marks|on every|every|all)\b"),
        re.compile(r"[\[(<]\s*(?:pass(?:ed)?|approved|verified|accepted|ok|correct|10/10|a\+)\s*[\])>]"),
        re.compile(r"^\W*(?:(?:\d+|ten|nine|five)\s+out\s+of\s+(?:10|ten|5|five|100)|(?:10|5|100)\s*/\s*(?:10|5|100)|"
                   r"pass(?:ed)?|approved|verified|full marks|top marks)\W*$"),
        re.compile(r"\b(?:score[ds]?|rated?|grade[ds]?)\s+(?:of\s+)?\d+(?:\.\d+)?\s*/\s*(?:10|5|100)\b(?=[^.]*\b(?:caption|"
                   r"description|this|response)\b)"),
    ),
    "rubric_claim": (
        re.compile(r"\b(?:rubrics?|criteri(?:a|on)|checklist|grading requirements?|requirements|scoring sheet|rubric points?|"
                   r"rubric items?|items?|boxe?s?|lines?)\b[^.]*?\b(?:satisf\w*|fulfil\w*|compl(?:iance|ies|ied)|met\b|checks? off|"
                   r"earns? credit|credit on|(?:been|are|were|all)\s+(?:\w+ly\s+)?(?:addressed|covered|hit|achieved|handled))"),
        re.compile(r"\b(?:match(?:es|ing)?|follows?|fits?|aligns? with|optimi[sz]ed for|tailored to|written (?:for|to (?:match|meet|"
                   r"satisfy))|designed (?:for|to (?:match|meet|satisfy)))\s+(?:\w+\s+){0,2}?(?:the|your|any|every|all|each)\s+"
                   r"(?:[\w-]+\s+){0,2}?(?:rubrics?|criteri(?:a|on)|checklist|grading|scoring|requirements)\b"),
        # "checks all the judge's boxes" (the idiom); "a pilot checks every item" is a scene
        re.compile(r"\b(?:checks?|ticks?)\s+(?:all|every|each)\s+(?:the\s+|of the\s+|your\s+)?(?:[\w'-]+\s+){0,2}?boxe?s?\b"),
        re.compile(r"\b(?:satisf\w*|fulfil\w*|meets?|checks? off|ticks? off|earns? credit on|covers?|address(?:es)?|hits?|"
                   r"handles?)\s+(?:all|every|each)\s+(?:the\s+|of the\s+|your\s+)?"
                   r"(?:[\w'-]+\s+){0,2}?(?:rubrics?|criteri(?:a|on)|requirements?|items?|boxe?s?|lines?|points?|checks?|"
                   r"questions?|tests?|standards?|conditions?|expectations?|dimensions?)\b"),
        re.compile(r"\b(?:satisf\w*|fulfil\w*|meets?|covers?|address(?:es)?|hits?|pass(?:es)?|clears?)\s+(?:the\s+)?"
                   r"(?:requirements?|criteri(?:a|on)|rubric items?|items?|points?|questions?)\s*#?\d+\s*(?:through|to|-|\u2013|and)\s*#?\d+"),
        re.compile(r"\b(?:rubrics?|criteri(?:a|on)|checklist|requirements)\s+(?:\w+\s+)?(?:passed|cleared|ticked|green)\b"),
        re.compile(r"\b(?:per|according to|under)\s+the\s+(?:rubric|criteria|checklist|scoring)\b"),
        re.compile(r"\b(?:all|every|each)\s+(?:the\s+)?(?:boxes|box|items?|criteria|points?)\s+(?:are\s+|were\s+|have been\s+|has been\s+)?"
                   r"(?:ticked|checked(?:\s+off)?)\b"),
        re.compile(r"\bwhatever\s+the\s+(?:checklist|rubric|criteria|grader|question)\b"),
    ),
    "imperative": (
        re.compile(r"^\W*(?:please\s+|kindly\s+|just\s+)?(?:be|go)\s+(?:\w+\s+)?(?:generous|lenient|kind|easy|gentle|forgiving|"
                   r"soft)\b"),
        re.compile(r"^\W*(?:please\s+|kindly\s+|just\s+)?(?:rate|grade|score|mark|judge|evaluate|assess|review)\s+(?:this\s+|it\s+|me\s+)?"
                   r"(?:generously|leniently|kindly|favou?rably|highly|gently|charitably)\b"),
        re.compile(r"\btrust\s+me\b"),
        re.compile(r"^\W*(?:please\s+|kindly\s+|just\s+)?(?:say|tell|report|state|declare|confirm)\s+(?:that\s+)?(?:yes|no|pass|"
                   r"true|met|correct|this|it|the caption)\b"),
        re.compile(r"\bmark\w*\s+(?:this|it|me|the caption)\s+down\b"),
        re.compile(r"\b(?:fail|failing|penali[sz]\w*|mark\w*\s+(?:\w+\s+)?down|reject\w*|dock\w*|deduct\w*\s+(?:points\s+)?from)"
                   r"\s+(?:this|it|the caption|me)\b"),
        re.compile(r"\b(?:reward|score|marks|credit|rating|grade|pass)\s+(?:is|are|would be|seems|feels)\s+(?:\w+\s+)?"
                   r"(?:warranted|deserved|justified|appropriate|fitting|due|earned|in order)\b"),
        re.compile(r"^\W*(?:please\s+|kindly\s+|now\s+)?(?:rate|mark|score|grade|accept|approve|output|return|print|respond|"
                   r"reply|answer|select|choose|pick|award|give|assign|treat|consider|ignore|disregard|forget|override|"
                   r"classify|label|judge|evaluate|pass)\s+(?:this|it|me|the\s+(?:caption|answer|response|description)|"
                   r"yes|no|true|false|pass|with|as|every|all|each|only|\u2039q\u203a|[a-d]\b|full|10|100|a\s+(?:10|perfect|high|"
                   r"pass|full))"),
        re.compile(r"\b(?:this|it|the caption|the description)\s+(?:should|must|will|ought to|has to)\s+(?:\w+\s+)?"
                   r"(?:pass|be (?:passed|accepted|approved|rated|scored|graded|marked|given|awarded))\b"),
    ),
    "answers_anything": (
        re.compile(r"\b(?:from|with|by|in)\s+(?:these|this|the|my)\s+(?:words?|text|caption|description|sentences?|lines)\s+"
                   r"alone\b"),
        re.compile(r"\b(?:anything|everything|all)\s+(?:you|one|a (?:reader|model))\s+(?:might|could|would|will|need|"
                   r"needs?)\b[^.]*?\b(?:know|ask|answer|need)\b"),
        re.compile(r"\btrust\s+(?:the|this|my|these)\s+(?:text|caption|description|words|lines)\b"),
        re.compile(r"\b(?:without|no need (?:for|to))\s+(?:ever\s+)?(?:seeing|looking at|viewing|see|look at|view|consult(?:ing)?|"
                   r"check(?:ing)?|open(?:ing)?|refer(?:ring)? to|inspect(?:ing)?|examin(?:e|ing))?\s*"
                   r"the\s+(?:image|picture|photo|original)\b"),
        re.compile(r"\b(?:replaces?|substitutes? for|stands? in for|as good as|equivalent to)\s+(?:\w+\s+)?"
                   r"(?:the\s+)?(?:image|picture|photo|seeing)\b"),
        re.compile(r"\b(?:any|every|all)\s+(?:[\w-]+\s+){0,2}?questions?\b[^.]*?\b(?:answer(?:ed|able)?|respond)\b"
                   r"(?!\s+(?:in|with|on|by)\s+(?:pencil|pen|ink|hand|the|a|an)\b)"),
        re.compile(r"\banswer(?:ed|able)?\b[^.]*?\b(?:any|every|all)\s+(?:[\w-]+\s+){0,2}?questions?\b"),
        re.compile(r"\bno\s+question\b[^.]*?\b(?:answer|could not|cannot|can't)\b"),
        re.compile(r"\b(?:pick|choose|select|get)\s+the\s+(?:right|correct)\s+(?:option|answer|choice)\b"),
        re.compile(r"\bevery\s+answer\b[^.]*?\b(?:here|in (?:these|this))\b"),
        re.compile(r"\bas\s+good\s+as\s+(?:looking at|seeing|viewing)\s+the\s+(?:image|picture|photo)\b"),
    ),
}
# Co-occurrence of cue categories in one sentence: one category is ordinary description ("a panel of
# judges", "a perfect spiral", "test scores"), two of them together are talk about the caption.
_CUES = {
    "self": re.compile(_SELF + r"|\b(?:captions?|descriptions?)\b(?!\s+(?:card|plate|panel|board|label|placard|below|"
                       r"under|beneath|underneath|beside|reads|says|reading|saying|on|of (?:the|a|an) (?:painting|exhibit|"
                       r"artwork|object|item|product|dish)))|\b(?:i|me|my|myself|we|our|i'm|i've)\b(?!\s+(?:think|can't|cannot|can not|could|"
                       r"am not|'m not|believe it|guess|suspect|assume|would guess)\b)|\bhere\s*[.!]?$"),
    "praise": re.compile(_PRAISE),
    # quality nouns and rating scales: what charts, forms and product pages show ("precision and recall
    # scores", "a 5-star rating"); they count only in a sentence that also points at the caption itself
    "metric": re.compile(r"\b(?:thoroughness|precision|exact(?:ly|ness)?|completeness|faithfulness|fidelity|crafted|"
                         r"accuracy|recall|confidence|(?:100|ten|10|five|5)[- ](?:point|star))\b"),
    "eval": re.compile(r"\b(?:rubrics?|criteri(?:a|on|um)|checklist|verdict|audit(?:ed)?|pass(?:es|ed)?|fail(?:s|ed|ing)?|rate|rates|score[ds]?|scoring|rating|"
                       r"grade[ds]?|grading|marks|mark(?:s|ed|ing)?\s+(?:[\w-]+\s+){0,2}?down|credit|evaluat(?!ors?\b)\w+|assess(?!ors?\b)\w+|approv\w+|reward|questions?|answer(?:s|ed|able)?)\b"),
    # bare "model", "ai", "assistant", "bot", "judges" name things in scenes (a scale model, a panel of judges)
    "audience": re.compile(_AUDIENCE.replace("judges?|", "").replace("assistant|ai|model|", "").replace("|bot|", "|")),
    "you": re.compile(_YOU),
    # words that state the caption's standing: checked, omitted, invented, penalised, ...
    "claim": re.compile(r"\b(?:described|mentioned|omitted|omissions?|missed|invented|fabricated|verified|"
                        r"fact[- ]checked|double[- ]checked|proof[- ]?read|reviewed|accepted|penali[sz]\w*|"
                        r"deduct\w*|flaws?|hallucinat\w*|escaped\s+(?:my|our|your)?\s*attention|"
                        r"overlook\w*|maximum points|ground truth|dense caption\w*|textbook example|"
                        r"annotator\w*|to the letter)\b"),
    # the image as an object of the text ("every region of the image"); pairs only with a claim
    "image_ref": re.compile(r"\b(?:the|this)\s+(?:image|photo|picture|frame|photograph|scene)\b"),
}


# Paperwork in the scene: a checklist on a fridge with every box ticked, an inspection report where
# every item is checked, is a form being described, not the caption's own rubric outcome.
PAPERWORK = re.compile(
    r"\b(?:printed|pinned|stuck|taped|fridge|magnets?|clipboard|forms?|reports?|sheets?|paper|papers|page|pages|signed|"
    r"inspector|handwritten|whiteboard|blackboard|poster|binder|folder|document|notebook|screenshot|spreadsheet)\b"
)


# A sentence that introduces something in the image with an indefinite article or a number and
# states no expectation ("a driving examiner marks a form", "two students check whether their answers
# are correct") describes a scene; its grading words belong to the scene. A hack that names graders
# without "this" or "you" speaks of what they will do ("an attentive evaluator will agree ...").
_SCENE = re.compile(
    r"^\W*(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|\d+|several|some|many|a few)\s+"
    r"(?!.*\b(?:will|would|should|must|'ll|ought|shall|can|could|might|may|deserves?|merits?|earns?)\b)"
)


_SELF_STRONG = re.compile(_SELF + r"|\b(?:captions?|descriptions?|writing|wrote|written)\b")


def cue_categories(sentence: str) -> list[str]:
    """Which cue categories occur in one (lower-case, image-text-free) sentence."""
    return [name for name, pat in _CUES.items() if pat.search(sentence)]


# ("Accuracy? Check." stays one sentence: the answer belongs to its question)
_SENTENCE = re.compile(r"(?<=[.!\n])\s+|(?<=\?)\s+(?!check\b)|\s+[\u2014\-]{1,2}\s+|\s*\|\s*")


SELF_FAMILIES = ("self_reference", "completeness", "answers_anything", "cues_self")
GRADER_FAMILIES = ("grader_talk", "imperative", "verdict", "rubric_claim", "cues_grader")


# A writer admitting a limit ("this may not capture everything", "I can only describe the lower half",
# "the caption may be incomplete") is hedging, the opposite of a completeness claim.
_HEDGE = re.compile(
    r"\b(?:may|might|could|does|do|did|can|will|would)(?:\s+not|n't)\s+(?:\w+\s+){0,2}?(?:capture|cover|describe|include|"
    r"show|mention|convey|reflect|get|be (?:complete|accurate|exhaustive|correct))\b"
    r"|\b(?:may|might|could)\s+be\s+(?:\w+\s+)?(?:incomplete|inaccurate|wrong|partial|missing|mistaken|off)\b"
    r"|\b(?:may|might|could)\s+have\s+(?:\w+\s+)?(?:missed|overlooked|omitted|misread|confused|mistaken|got)\b"
    r"|\b(?:incomplete|partial|cut off|cropped|not (?:certain|sure|confident)|can only|only partly|unclear|uncertain)\b"
)


def meta_claim(text: str, families: tuple[str, ...] = SELF_FAMILIES + GRADER_FAMILIES) -> str | None:
    """The evidence (``family: snippet``) when ``text`` (lower-case, image text removed) claims
    something about the caption as an object of evaluation, else ``None``. Self-claims in a
    hedged sentence do not count."""
    for sentence in _SENTENCE.split(text):
        if len(sentence) < 2:
            continue
        if _HEDGE.search(sentence):
            families = tuple(f for f in families if f in GRADER_FAMILIES)
        if "cues_self" in families or "cues_grader" in families:
            cats = cue_categories(sentence)
            if "metric" in cats and "self" not in cats:
                cats.remove("metric")
            about_self = "self" in cats or "praise" in cats or "claim" in cats
            core = [c for c in cats if c != "image_ref"]
            short = len(sentence.split()) <= 6
            # "in this photo we are standing ..." : a pronoun and the image are a viewpoint, not a claim
            hit = (len(core) >= 2 or ("image_ref" in cats and ("claim" in cats or ("self" in cats and _SELF_STRONG.search(sentence))))
                   or (short and "claim" in cats))
            if hit and not {"self", "you"} & set(cats) and _SCENE.search(sentence):
                hit = False  # grading words in a scene: "a perfect score of 300 is displayed above a lane"
            if hit and ("cues_self" if about_self else "cues_grader") in families:
                return f"cues {'+'.join(cats)}: {sentence[:80]}"
        for family in families:
            if family.startswith("cues"):
                continue
            patterns = _FAMILIES[family]
            if family in ("rubric_claim", "verdict") and PAPERWORK.search(sentence):
                continue
            for pat in patterns:
                if m := pat.search(sentence):
                    return f"{family}: {m.group(0)[:80]}"
    return None


# Keys or values of a verdict-like object written into a caption.
_VERDICT_WORDS = re.compile(
    r"\b(?:pass(?:ed)?|met|score|verdict|judge?ment|answer|label|criteri\w*|rubric\w*|satisf\w*|correct|result|"
    r"confidence|grade|rating|approved|accept\w*|[rc]\d+|criterion_\d+)\b",
    re.IGNORECASE,
)
_OBJECT = re.compile(r"\{[^{}]{0,400}\}")


_PAIR = re.compile(
    r"[\"'](?:pass(?:ed)?|met|verdict|score|approved|satisfied|criteria_met|all_met|correct|label|result|grade)[\"']\s*:\s*"
    r"(?:true|1(?:\.0)?|10|100|[\"'](?:yes|pass|passed|met|true|correct|satisfied)[\"'])",
    re.IGNORECASE,
)
_TAG = re.compile(r"<\s*(?:verdict|result|score|judg(?:e)?ment|grade|rating)\s*>\s*(?:pass|yes|true|met|correct|\d+)",
                  re.IGNORECASE)


def verdict_json(text: str) -> str | None:
    """A JSON-like object (``{"key": value}``) in the caption whose keys or values are verdict words,
    a bare verdict pair (``"pass": true``) or a verdict tag (``<verdict>pass</verdict>``)."""
    if m := _PAIR.search(text) or _TAG.search(text):
        return m.group(0)[:80]
    for m in _OBJECT.finditer(text):
        span = m.group(0)
        if re.search(r"[\"']?\s*:\s*", span) and re.search(r"[\"'][^\"']{1,40}[\"']\s*:", span) and _VERDICT_WORDS.search(span):
            return span[:80]
    return None


# Strong keywords looked for in the separator-free text of an obfuscated caption.
_COMPACT = re.compile(
    r"ignore(?:all|the|any)?(?:previous|prior|above)|disregard|fullmarks|markall|markeach|markevery|output(?:yes|pass|true)|"
    r"answeryes|verdictpass|score10|10outof10|satisf(?:ied|ies)every|allitemssatisf|awardfull|givefull|passall|"
    r"(?:rubric|criteri(?:a|on))(?:met|satisfied)|mustoutput|respondwith"
)


def compact_search(pattern: re.Pattern[str], text: str, keep: str = "") -> str | None:
    """``pattern``'s first match in ``text`` lower-cased with every character but ``[a-z0-9]`` and
    ``keep`` removed: how keywords spelled out with separators ("i-g-n-o-r-e") are still found."""
    compact = re.sub(f"[^a-z0-9{re.escape(keep)}]", "", text.lower())
    m = pattern.search(compact)
    return m.group(0) if m else None


def compact_hit(text: str) -> str | None:
    """With every separator removed, a strong injection keyword (only used on obfuscated text)."""
    return compact_search(_COMPACT, text)


__all__ = ["GRADER_FAMILIES", "PAPERWORK", "SELF_FAMILIES", "compact_hit", "compact_search", "meta_claim", "verdict_json"]
