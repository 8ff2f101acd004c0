#!/usr/bin/env python3
"""Writes tests/data/tokenizer/corpus.json: the strings the tokenizer tests
encode (English, code, numbers, Unicode scripts, emoji, combining marks,
RTL, whitespace runs, control-token text). Deterministic.

Usage: python3 tools/reference/tokenizer_corpus.py > tests/data/tokenizer/corpus.json
"""
import json
import random

ENGLISH = [
    "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they've done it, haven't they? We'd know.", "IT'S ALL CAPS, ISN'T IT? YOU'RE RIGHT.",
    "don't Don't DON'T dOn'T", "rock 'n' roll", "'s 't 're 've 'm 'll 'd", "O'Reilly's book",
    "She said \"hi\" and left.", "e.g. i.e. etc. Mr. Smith", "A", "a", "", " ", "  ", "hello", " hello",
    "  hello", "hello ", "hello  ", "Hello\nWorld", "Hello\n\nWorld", "Hello\r\nWorld\r\n", "tab\tseparated\tvalues",
    "trailing spaces   ", "   leading spaces", "multiple   spaces   between   words", "mixed \t \n whitespace",
    "\n", "\n\n\n", "\t", "\r\n", " \n ", "line1\n  line2\n    line3", "end.\n", "Question? Answer!",
    "semicolons; colons: dashes - em—dashes – en", "(parentheses) [brackets] {braces} <angles>",
    "email@example.com and https://example.org/path?q=1&r=2#frag", "C'est la vie",
    "supercalifragilisticexpialidocious", "antidisestablishmentarianism", "Hugging Face SmolLM2 is small.",
    "The year 2024 was warmer than 1999.", "Once upon a time, in a land far away, there lived a king.",
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
]
CODE = [
    "def f(x):\n    return x * 2\n", "int main() { return 0; }", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "if x == 1:\n    print('one')\nelse:\n    pass", "#include <stdio.h>\n", "std::vector<int32_t> v{1, 2, 3};",
    "const auto& [k, v] : map", "x += 1; y -= 2; z *= 3; w /= 4;", "a && b || !c", "x->y.z", "arr[i][j]",
    "lambda x: x**2", "SELECT * FROM users WHERE id = 42;", "<div class=\"main\">Hi</div>",
    "{\"key\": \"value\", \"n\": [1, 2.5, -3e10]}", "$HOME/bin:/usr/local/bin", "git commit -m \"fix: bug\"",
    "// comment\n/* block */", "    indented with four spaces", "\t\tindented with tabs", "x=1;;;;;", "!!!???...",
    "```python\nprint(1)\n```", "fn main() -> Result<(), Box<dyn Error>> {}", "0x1F 0b1010 0o777",
    "@decorator\nclass A(B):", "__init__ __main__ _private", "camelCaseName snake_case_name SCREAMING_CASE",
    "a\\nb\\tc", "~/.bashrc && echo $?", "i++; --j;", "x<<2>>1", "#!/usr/bin/env python3",
]
NUMBERS = [
    "0", "1", "12", "123", "1234", "12345", "123456789", "3.14159", "-42", "+7", "1,000,000", "1e-5", "2.5e10",
    "$9.99", "100%", "3/4", "10:30", "2024-01-15", "v1.2.3", "phone 555-0123", "abc123def", "123abc",
    "a1b2c3", "１２３ fullwidth digits", "²³ superscripts", "½ ¼ ¾", "Ⅻ roman", "٣٤٥ arabic-indic",
    "७८९ devanagari digits", "00007", "9" * 20, "1 2 3 4 5", "1  2   3",
]
UNICODE = [
    "café", "naïve résumé", "Ångström", "über straße", "Ελληνικά γράμματα", "Русский язык", "Україна",
    "日本語のテキスト", "中文文本测试", "한국어 텍스트", "ไทย ภาษา", "עברית מימין לשמאל", "العربية من اليمين",
    "مرحبا بالعالم 123", "שלום עולם", "हिन्दी भाषा", "বাংলা", "தமிழ்", "ქართული", "Հայերեն",
    "emoji 😀😃😄", "👍🏽", "👨‍👩‍👧‍👦 family", "🇫🇷🇩🇪 flags", "❤️ heart", "✨🚀🌟",
    "e\u0301 combining acute", "n\u0303 a\u0308 o\u0302", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319 zalgo",
    "ﬁ ligature", "Ｆｕｌｌｗｉｄｔｈ", "ℌ𝔢𝔩𝔩𝔬 math", "𝕏 𝟘𝟙", "\u00a0nbsp\u00a0", "\u2003em space\u2003",
    "zero\u200bwidth", "\u3000ideographic space", "\u2028line sep", "soft\u00adhyphen", "\ufeffBOM",
    "tab\u000bvt", "form\u000cfeed", "\u0085nel", "«guillemets» „quotes“ ‘single’", "…ellipsis…",
    "€£¥₹", "©®™", "°C ±5", "→ ← ↑ ↓", "∀x∈ℝ: x²≥0", "ſ long s", "it'ſ", "K kelvin",
    "Ǆ ǅ ǆ titlecase", "ß ẞ", "İstanbul ıi", "ʼapostrophe", "日本 語", "中文 English 混合", "русский English",
    "ʻokina", "ๆ", "ctrl\x04\x06\x13\x1d bytes", "a\U00097777b unassigned plane", "\x00nul", "ـ", "a\u0300\u0301\u0302\u0303", "\U0001F600", "\U00010348 gothic", "\U0001D11E music",
]
SPECIAL = [
    "<|im_start|>user\nHello<|im_end|>\n", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "text<|endoftext|>more text", "<|im_start|><|im_end|>", "<|im_start|> spaced <|im_end|>",
    "<|im_start", "im_end|>", "<|im_end|<|im_end|>", "<repo_name>agentkv<file_sep>main.cpp", "<filename>a.py\n",
    "<|im_start|>user\n日本語<|im_end|>", "before <|im_end|> after", "<|im_end|>\n\n<|im_start|>assistant",
    "<s> </s> <unk>", "[INST] hi [/INST]", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<jupyter_code>print(1)<jupyter_output>1", "<<|im_start|>>", "<|tool|>call<|tool|>",
]


def generated(rng):
    pieces = ENGLISH[:20] + CODE[:10] + NUMBERS[:15] + UNICODE[:30] + SPECIAL[:8] + [" ", "  ", "\n", "\t", "\r\n"]
    out = []
    for _ in range(80):
        k = rng.randint(2, 5)
        out.append("".join(rng.choice(pieces) for _ in range(k)))
    # Whitespace runs of every shape in front of and behind words.
    ws = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", " \t ", "\u00a0", "\u3000"]
    for w in ws:
        out.append("word" + w + "word")
        out.append(w + "lead")
        out.append("trail" + w)
        out.append("1" + w + "2")
        out.append("!" + w + "?")
    return out


def main():
    rng = random.Random(1234)
    corpus = ENGLISH + CODE + NUMBERS + UNICODE + SPECIAL + generated(rng)
    seen, uniq = set(), []
    for s in corpus:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    print(json.dumps({"strings": uniq}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
