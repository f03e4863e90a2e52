import Testing

@testable import Skillbus

@Suite("TextStatistics")
struct TextStatisticsTests {
    @Test(
        "counts lines",
        arguments: [
            ("", 0),
            ("a", 1),
            ("a\n", 1),
            ("a\nb", 2),
            ("a\nb\n", 2),
            ("\n", 1),
            ("\n\n", 2),
            ("a\n\nb", 3),
            ("a\r\nb\r\n", 2),
            ("a\rb", 2),
        ]
    )
    func lines(text: String, expected: Int) {
        #expect(TextStatistics.compute(text).lines == expected)
    }

    @Test("returns zeros for empty text")
    func emptyText() {
        #expect(TextStatistics.compute("") == TextStatistics(lines: 0, words: 0, characters: 0, topWords: []))
    }

    @Test("counts words case-insensitively and ranks them")
    func basicCounts() {
        let stats = TextStatistics.compute("Hello, world! Hello again.\nWORLD hello")
        #expect(stats.lines == 2)
        #expect(stats.words == 6)
        #expect(stats.characters == 38)
        #expect(
            stats.topWords == [
                WordCount(word: "hello", count: 3),
                WordCount(word: "world", count: 2),
                WordCount(word: "again", count: 1),
            ]
        )
    }

    @Test("breaks ties alphabetically and honours the top limit")
    func tiesAndLimit() {
        let text = "pear apple fig apple pear kiwi plum grape"
        #expect(
            TextStatistics.compute(text, top: 3).topWords == [
                WordCount(word: "apple", count: 2),
                WordCount(word: "pear", count: 2),
                WordCount(word: "fig", count: 1),
            ]
        )
        #expect(TextStatistics.compute(text).topWords.count == 5)
        #expect(TextStatistics.compute(text, top: 100).topWords.count == 6)
        #expect(TextStatistics.compute(text, top: 0).topWords.isEmpty)
        #expect(TextStatistics.compute(text, top: -1).topWords.isEmpty)
    }

    @Test(
        "splits words on anything but letters, digits and apostrophes",
        arguments: [
            ("don't stop, it's fine", ["don't", "stop", "it's", "fine"]),
            ("rock \u{2019}n\u{2019} roll", ["rock", "n", "roll"]),
            ("'quoted' words", ["quoted", "words"]),
            ("a ' b '' c", ["a", "b", "c"]),
            ("room 101, floor 3", ["room", "101", "floor", "3"]),
            ("snake_case kebab-case", ["snake", "case", "kebab", "case"]),
            ("Grüße aus 東京, café naïve", ["grüße", "aus", "東京", "café", "naïve"]),
        ]
    )
    func words(text: String, expected: [String]) {
        let stats = TextStatistics.compute(text, top: 100)
        #expect(stats.words == expected.count)
        let counted = stats.topWords.reduce(0) { $0 + $1.count }
        #expect(counted == expected.count)
        #expect(Set(stats.topWords.map(\.word)) == Set(expected))
    }

    @Test("treats canonically equivalent spellings as the same word")
    func canonicalEquivalence() {
        // Decomposed "e" + combining acute and precomposed "É" lowercase to equal Swift strings.
        let stats = TextStatistics.compute("e\u{301}cole \u{C9}COLE")
        #expect(stats.words == 2)
        #expect(stats.topWords == [WordCount(word: "\u{E9}cole", count: 2)])
    }

    @Test(
        "counts characters as grapheme clusters",
        arguments: [
            ("abc", 3),
            ("e\u{301}", 1),
            ("👨‍👩‍👧", 1),
            ("🇳🇱!", 2),
            ("a\r\nb", 3),
        ]
    )
    func characters(text: String, expected: Int) {
        #expect(TextStatistics.compute(text).characters == expected)
    }
}
