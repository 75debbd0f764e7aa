"""``ares.summaries``: the log of what compaction replaced, shared by its writer and readers.

* ``record``: the summary record, anchored to the hash chain it stands in for (pure);
* ``store``: reading a partition's summaries, and the fenced writer the compactor uses;
* ``reader``: ``SummarisedReader``, reads of a stream that survive trimming, and the
  audit's check of such a read.

The compactor writes here and the replay reader and the CLI read here; neither service
imports the other.
"""
