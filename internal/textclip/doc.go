// Package textclip owns what workflow history carries of a long text in
// place of the whole: a [Preview] cut to [PreviewBytes] on a character
// boundary, the [Digest] that identifies the whole, and [Clip] and
// [CutAtRune], which shorten a text for a message or an error without
// splitting a UTF-8 character. Workflows, activities and the checks of a
// tool's arguments cut text the same way through it.
package textclip
