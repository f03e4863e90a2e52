/// How often a (lowercased) word occurs in a text.
public struct WordCount: Sendable, Equatable {
    public let word: String
    public let count: Int

    public init(word: String, count: Int) {
        self.word = word
        self.count = count
    }
}

/// Line, word and character counts of a text, plus its most frequent words.
public struct TextStatistics: Sendable, Equatable {
    public let lines: Int
    public let words: Int
    /// Grapheme clusters, i.e. what a reader perceives as characters.
    public let characters: Int
    /// Most frequent lowercased words, by count descending and then word ascending.
    public let topWords: [WordCount]

    public init(lines: Int, words: Int, characters: Int, topWords: [WordCount]) {
        self.lines = lines
        self.words = words
        self.characters = characters
        self.topWords = topWords
    }

    /// Computes statistics for `text`, keeping at most `top` entries in `topWords`.
    ///
    /// A word is a run of letters, digits and apostrophes; apostrophes at either end of a run are
    /// treated as quotation marks and dropped, so `'hello'` counts as `hello` and a lone `'` is no word.
    public static func compute(_ text: String, top: Int = 5) -> TextStatistics {
        var lineCount = 0
        var lastWasNewline = true
        var frequencies: [String: Int] = [:]
        var wordCount = 0
        var characterCount = 0
        var currentWord = ""

        func finishWord() {
            let word = trimmingApostrophes(currentWord)
            currentWord = ""
            guard !word.isEmpty else {
                return
            }
            wordCount += 1
            frequencies[word.lowercased(), default: 0] += 1
        }

        for character in text {
            characterCount += 1
            // A line ends at its newline, so only text after the last newline adds an extra line.
            if character.isLineBreak {
                lineCount += 1
                lastWasNewline = true
            } else {
                lastWasNewline = false
            }
            if character.isWordCharacter {
                currentWord.append(character)
            } else {
                finishWord()
            }
        }
        finishWord()
        if !lastWasNewline {
            lineCount += 1
        }

        let ranked =
            frequencies
            .map { WordCount(word: $0.key, count: $0.value) }
            .sorted { lhs, rhs in
                lhs.count != rhs.count ? lhs.count > rhs.count : lhs.word < rhs.word
            }
        return TextStatistics(
            lines: lineCount,
            words: wordCount,
            characters: characterCount,
            topWords: Array(ranked.prefix(max(0, top)))
        )
    }
}

private func trimmingApostrophes(_ word: String) -> Substring {
    var slice = Substring(word)
    while let first = slice.first, first.isApostrophe {
        slice.removeFirst()
    }
    while let last = slice.last, last.isApostrophe {
        slice.removeLast()
    }
    return slice
}

extension Character {
    /// "\r\n" is a single Character, so it counts as one line break just like "\n" or "\r".
    fileprivate var isLineBreak: Bool {
        self == "\n" || self == "\r\n" || self == "\r"
    }

    fileprivate var isApostrophe: Bool {
        self == "'" || self == "\u{2019}"
    }

    fileprivate var isWordCharacter: Bool {
        isLetter || isNumber || isApostrophe
    }
}
