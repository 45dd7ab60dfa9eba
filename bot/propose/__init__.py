"""Proposers turn a problem (and feedback on earlier tries) into candidate modules."""
